-- A Stripe event answered `conflict` (a second paid subscription to an agent the user pays for) is left unrecorded.
--
-- The caller (functions/billing/subscription-state.ts, writeStripeRead) undoes such a purchase at Stripe, and the event
-- must count as processed only once that is done, so that Stripe's redelivery runs the undo again after a failure. The
-- event was recorded here, in the transaction that answered `conflict`, and un-recorded by a DELETE when the undo
-- failed: a DELETE that fails too when the failure is the database's (review 118: the connection cut mid-undo left the
-- event recorded, and Stripe's redelivery answered "duplicate" and did nothing, the second subscription charging on,
-- or, when the kept one was the unpaid one and had been ended, the paid purchase never written). Now the conflict
-- leaves no record, and the caller records the event once the undo is done.

create or replace function public.billing_apply_stripe_subscription(
  p_event_id text,
  p_event_type text,
  p_stripe_subscription_id text,
  p_stripe_customer_id text,
  p_user_id text,
  p_price_id text,
  p_status text,
  p_period_start timestamptz,
  p_period_end timestamptz,
  p_cancel_at_period_end boolean,
  p_canceled_at timestamptz,
  p_pending_price_id text,
  p_pending_kind text,
  p_pending_invoice_id text,
  p_schedule_id text,
  p_now timestamptz,
  p_read bigint default null
) returns table (outcome text, subscription_id uuid)
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_tier public.tiers%rowtype;
  v_pending_tier uuid;
  v_pending_kind text;
  v_row public.subscriptions%rowtype;
  v_known public.subscriptions%rowtype;
  v_foreign boolean;
  v_id uuid;
begin
  if p_event_id is not null then
    insert into public.stripe_events (id, type, received_at) values (p_event_id, p_event_type, p_now)
    on conflict (id) do nothing;
    if not found then
      return query select 'duplicate'::text, null::uuid;
      return;
    end if;
  end if;

  if p_stripe_subscription_id is null or p_user_id is null then
    return query select 'recorded'::text, null::uuid;
    return;
  end if;

  select * into v_tier from public.tiers where stripe_price_id = p_price_id;
  v_foreign := not found;
  -- a price no tier of the subscription's own agent has (a plan switch that a portal configuration or the Dashboard
  -- allowed): a row already written for it keeps its tier and takes the rest (period, cancellation, and the status,
  -- except that it grants no access while the price is not its own), so it still ends with Stripe's subscription and
  -- never serves a tier for another price; the outcome says unknown_price (changed in 20261126000500)
  select * into v_known from public.subscriptions where stripe_subscription_id = p_stripe_subscription_id;
  if found and (v_foreign or v_tier.agent_id <> v_known.agent_id) then
    select * into v_tier from public.tiers where id = v_known.tier_id;
    v_foreign := true;
  elsif v_foreign then
    return query select 'unknown_price'::text, null::uuid;
    return;
  end if;

  if p_pending_price_id is not null and p_pending_price_id <> p_price_id and not v_foreign then
    select id into v_pending_tier from public.tiers where stripe_price_id = p_pending_price_id and agent_id = v_tier.agent_id;
    if v_pending_tier is not null then
      v_pending_kind := p_pending_kind;
    end if;
  end if;

  perform pg_advisory_xact_lock(hashtextextended('subscription:' || p_user_id || ':' || v_tier.agent_id::text, 0));

  select * into v_row from public.subscriptions where stripe_subscription_id = p_stripe_subscription_id for update;
  if found and p_read is not null and v_row.stripe_read is not null and v_row.stripe_read > p_read then
    return query select 'superseded'::text, v_row.id;
    return;
  end if;
  if not found and p_status <> 'canceled' then
    select * into v_row from public.subscriptions
     where user_id = p_user_id and agent_id = v_tier.agent_id and status <> 'canceled'
     for update;
    if found and v_row.stripe_subscription_id is not null then
      -- a second paid subscription: the caller undoes it at Stripe, and the event counts as processed only once that
      -- is done, so it is not recorded here (changed in 20261127007400)
      if p_event_id is not null then
        delete from public.stripe_events where id = p_event_id;
      end if;
      return query select 'conflict'::text, v_row.id;
      return;
    end if;
    -- not paid yet (incomplete): the live free subscription stays as it is, usable, with its cycle, until Stripe's
    -- event of the payment converts it (changed in 20261126000500)
    if found and not public.subscription_grants_access(p_status) then
      return query select 'deferred'::text, v_row.id;
      return;
    end if;
  end if;

  if v_row.id is null then
    insert into public.subscriptions (
      user_id, agent_id, tier_id, status, current_period_start, current_period_end, cancel_at_period_end,
      canceled_at, pending_tier_id, pending_change_kind, pending_invoice_id, stripe_schedule_id,
      stripe_customer_id, stripe_subscription_id, stripe_read, created_at, updated_at)
    values (
      p_user_id, v_tier.agent_id, v_tier.id, p_status, p_period_start, p_period_end, p_cancel_at_period_end,
      p_canceled_at, v_pending_tier, v_pending_kind,
      case when v_pending_kind = 'upgrade' then p_pending_invoice_id end,
      case when v_pending_kind = 'downgrade' then p_schedule_id end,
      p_stripe_customer_id, p_stripe_subscription_id, p_read, p_now, p_now)
    returning id into v_id;
    return query select 'created'::text, v_id;
    return;
  end if;

  update public.subscriptions set
    tier_id = v_tier.id,
    -- on a price that is not its agent's, no access: it keeps its tier, but is not paying for it
    -- (changed in 20261126000500)
    status = case when v_foreign and public.subscription_grants_access(p_status) then 'incomplete' else p_status end,
    current_period_start = p_period_start,
    current_period_end = p_period_end,
    cancel_at_period_end = p_cancel_at_period_end,
    canceled_at = p_canceled_at,
    pending_tier_id = v_pending_tier,
    pending_change_kind = v_pending_kind,
    pending_invoice_id = case when v_pending_kind = 'upgrade' then p_pending_invoice_id end,
    stripe_schedule_id = case when v_pending_kind = 'downgrade' then p_schedule_id end,
    stripe_customer_id = p_stripe_customer_id,
    stripe_subscription_id = p_stripe_subscription_id,
    stripe_read = coalesce(p_read, stripe_read),
    updated_at = p_now
  where id = v_row.id;
  return query select case when v_foreign then 'unknown_price' else 'updated' end, v_row.id;
end;
$$;
