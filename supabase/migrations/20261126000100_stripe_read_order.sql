-- An older read of a Stripe subscription never overwrites a newer one.
--
-- Every writer of a paid subscription reads it from Stripe and then applies what it read
-- (public.billing_apply_stripe_subscription, 20261122000600). Two writers of one subscription (two webhook events on two
-- instances, or a webhook beside an admin's cancel) could apply in the opposite order of their reads: A reads "active",
-- the subscription is canceled at Stripe, B reads "canceled" and applies it, then A applies "active". Stripe sends
-- nothing more about a canceled subscription, so the user kept paid access for good.
--
-- Now each writer takes a number from public.stripe_reads BEFORE it reads from Stripe, and the subscription keeps the
-- number of the read it shows (stripe_read). A read whose number is lower than the stored one is not applied
-- ('superseded'; its event id is still recorded). Why that is enough: every change at Stripe sends an event, and the
-- writer that event starts takes its number after the change, so the read with the highest number, which is always
-- applied, saw every change made before any event's writer started; an older read loses nothing that a newer one did
-- not see. A number instead of a time: one sequence for every instance, strictly increasing, whatever the clocks.
-- No lock is held across the call to Stripe.
create sequence public.stripe_reads;
revoke all on sequence public.stripe_reads from public, anon, authenticated;

alter table public.subscriptions add column stripe_read bigint;

-- The writer, as in 20261122000600 but for the read's number (a new last parameter with a default, so an instance
-- still running the previous code, which names its arguments, keeps working during a deploy).
drop function public.billing_apply_stripe_subscription(text, text, text, text, text, text, text, timestamptz,
  timestamptz, boolean, timestamptz, text, text, text, text, timestamptz);

create function public.billing_apply_stripe_subscription(
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
  -- the read's number (public.stripe_reads, taken before the read); null from an instance of the previous code
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
  if not found then
    return query select 'unknown_price'::text, null::uuid;
    return;
  end if;

  if p_pending_price_id is not null and p_pending_price_id <> p_price_id then
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
      return query select 'conflict'::text, v_row.id;
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
    status = p_status,
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
  return query select 'updated'::text, v_row.id;
end;
$$;

revoke all on function public.billing_apply_stripe_subscription(text, text, text, text, text, text, text, timestamptz,
  timestamptz, boolean, timestamptz, text, text, text, text, timestamptz, bigint) from public, anon, authenticated;
