-- Billing: Stripe customers per user, processed webhook events, the Stripe links a subscription needs for
-- tier changes, tier archiving, and the one SQL function that writes a subscription's state from Stripe.

-- Each Stripe event id is processed once. The id is inserted in the same transaction that applies the state,
-- so an event whose processing failed is not recorded and Stripe's retry runs it again.
create table public.stripe_events (
  id text primary key,
  type text not null,
  received_at timestamptz(3) not null default now()
);

-- One Stripe customer per marketplace user, reused by every checkout and portal session.
-- account_created: the user account was made by an anonymous checkout (the buyer had none), so the success
-- page can tell the buyer to set a password from the mail we sent.
create table public.billing_customers (
  user_id text primary key,
  stripe_customer_id text not null,
  account_created boolean not null default false,
  created_at timestamptz(3) not null default now(),
  constraint billing_customers_stripe_key unique (stripe_customer_id)
);

alter table public.stripe_events enable row level security;
alter table public.billing_customers enable row level security;
-- No policies: only the service (table owner) reads or writes them.

-- What a pending tier change needs to be undone: the open proration invoice of an upgrade (voided on cancel),
-- the subscription schedule of a downgrade (released on cancel).
alter table public.subscriptions
  add column pending_invoice_id text,
  add column stripe_schedule_id text;

-- A deleted tier that subscriptions still reference is archived instead: kept for them (their Stripe price
-- keeps billing until they end), hidden from listings and closed to new checkouts.
alter table public.tiers add column archived_at timestamptz(3);

-- Applies Stripe's view of one subscription to the local row, in one transaction, and records the event id.
--   * Duplicate event id -> 'duplicate', nothing changes.
--   * No subscription (event about something else) -> the event is recorded, 'recorded'.
--   * The tier comes only from the subscription's current price; a price no tier has -> 'unknown_price'.
--   * The row is found by Stripe subscription id; a first sighting converts the user's live free subscription
--     to the same agent in place (free-to-paid keeps usage), else inserts. A second live paid subscription to
--     the same agent is not written ('conflict'): the database keeps one live subscription per (user, agent).
--   * A per-(user, agent) advisory lock serializes concurrent writers (webhook and success page), so the first
--     one inserts and the other updates the same row with the same values.
-- Every field is overwritten from the arguments, so applying the same Stripe state twice, or events in any
-- order (each re-reads the current state), ends in the same row.
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
  p_now timestamptz
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
      stripe_customer_id, stripe_subscription_id, created_at, updated_at)
    values (
      p_user_id, v_tier.agent_id, v_tier.id, p_status, p_period_start, p_period_end, p_cancel_at_period_end,
      p_canceled_at, v_pending_tier, v_pending_kind,
      case when v_pending_kind = 'upgrade' then p_pending_invoice_id end,
      case when v_pending_kind = 'downgrade' then p_schedule_id end,
      p_stripe_customer_id, p_stripe_subscription_id, p_now, p_now)
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
    updated_at = p_now
  where id = v_row.id;
  return query select 'updated'::text, v_row.id;
end;
$$;

-- Only the service calls it. It runs with the caller's rights (security invoker), so the API roles could not
-- write through it anyway; revoking EXECUTE also keeps it out of PostgREST's RPC surface on Supabase, whose
-- default privileges would otherwise grant it to anon and authenticated.
revoke all on function public.billing_apply_stripe_subscription(text, text, text, text, text, text, text, timestamptz,
  timestamptz, boolean, timestamptz, text, text, text, text, timestamptz) from public, anon, authenticated;
