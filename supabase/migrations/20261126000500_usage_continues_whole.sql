-- A user's usage of an agent continues across their subscriptions whole: live holds and threshold notices too, and
-- only from a subscription that ever granted access.
--
-- 20261126000300 carried a restarted subscription's counters, and three ways around it remained (found by two
-- hostile reviews, each with a repro):
--   1. Holds stayed on the canceled subscription. Its commit looked the hold up on the live subscription only and
--      answered 404, and the new counter did not include the hold: reserve the whole quota, cancel, start again,
--      and the held units were free again and the work never counted, round after round, fixed metrics included.
--      Now the live holds of every carried counter move to the new subscription with it (same id, amount and
--      expiry), each with a `reserved` ledger row there that names the subscription it came from, so a commit or
--      release of it works as before and a replay of its reserve request (same clientReqId) finds it.
--   2. Threshold notices were per subscription, so the same cycle (reserve the whole quota, release, cancel, start)
--      queued another "You have used all of your ..." mail each round without a unit used. The notices of every
--      carried counter are now carried too: a threshold is reached once per counter as it continues, which the
--      contract's "once per subscription, metric, period and threshold" allows (at most once), and the user gets
--      one mail per period as the contract says.
--   3. The predecessor was the newest canceled row, and two kinds of row that never granted access could be it:
--      a Stripe subscription first seen already ended (an abandoned checkout that expired: inserted as a canceled
--      row created now), and one that was never paid (incomplete, then incomplete_expired). Starting a free tier
--      after either began with fresh fixed counters, and a live free subscription converted in place to a never-paid
--      incomplete one lost its monthly cycle (a free one after it started a new cycle: "the user paid for that
--      usage", but nobody had). Now subscriptions.granted_access records whether a row ever granted access (a
--      subscription first seen ended is still recorded, for history and the funnel, but never did), the predecessor
--      is the newest canceled row that did, and a Stripe subscription first seen in a status without access leaves
--      the user's live free subscription as it is (outcome 'deferred': the free tier stays usable while the payment
--      is pending; Stripe's event when it is paid converts the free row then).
-- Also: a subscription whose price Stripe switched to another agent's tier's price was written with that tier under
-- its own agent (the pending tier was checked for this, the tier itself not); it is now refused as 'unknown_price'.
-- Rows from before this migration count as having granted access (as they all did for 20261126000300).

alter table public.subscriptions add column granted_access boolean not null default false;
update public.subscriptions set granted_access = true;

create function public.subscription_note_access() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  new.granted_access := new.granted_access or public.subscription_grants_access(new.status);
  return new;
end
$$;

create trigger subscriptions_note_access before insert or update of status on public.subscriptions
  for each row execute function public.subscription_note_access();

create or replace function public.subscription_predecessor(p_user_id text, p_agent_id uuid, p_subscription_id uuid)
returns table (id uuid, anchor timestamptz, free_cycle boolean)
language sql stable as $$
  select s.id, s.current_period_start, s.stripe_subscription_id is null
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and s.id <> p_subscription_id and s.status = 'canceled'
    and s.granted_access -- (changed in 20261126000500)
  order by s.created_at desc, s.id desc
  limit 1
$$;

-- As in 20261126000300, with the notices and the holds of the carried counters (both marked).
create or replace function public.subscription_continue_usage() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_prev record;
  v_rolling_start timestamptz;
  v_rolling_end timestamptz;
begin
  select * into v_prev from public.subscription_predecessor(new.user_id, new.agent_id, new.id);
  if not found then
    return null;
  end if;
  if new.stripe_subscription_id is null and v_prev.free_cycle then
    select b.period_start, b.period_end into v_rolling_start, v_rolling_end
    from public.billing_period(new.current_period_start, null, true, new.created_at) b;
  end if;

  with carried as (
    insert into public.usage_counters (subscription_id, metric_id, period_start, used, updated_at)
    select new.id, c.metric_id, c.period_start, c.used, new.created_at
    from public.usage_counters c
    join public.metric_definitions m on m.id = c.metric_id
    where c.subscription_id = v_prev.id and c.used > 0
      and ((m.kind = 'fixed' and c.period_start = '-infinity')
           or (m.kind = 'rolling' and c.period_start = v_rolling_start))
    returning metric_id, period_start, used
  )
  insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                   period_start, period_end, details, created_at)
  select public.quota_ledger_id(new.created_at), new.id, k.metric_id, 'carried_over', k.used, k.used, k.used, 0,
         public.metering_effective_limit(new.id, new.tier_id, k.metric_id, k.period_start),
         case when k.period_start = '-infinity' then new.created_at else v_rolling_start end,
         case when k.period_start = '-infinity' then null else v_rolling_end end,
         jsonb_build_object('fromSubscriptionId', v_prev.id), new.created_at
  from carried k
  order by k.metric_id;

  -- the notices of the carried counters, before the holds' ledger rows below could reach a threshold again
  -- (added in 20261126000500)
  insert into public.usage_threshold_notices (subscription_id, metric_id, period_start, threshold, used, quota_limit, reached_at)
  select new.id, n.metric_id, n.period_start, n.threshold, n.used, n.quota_limit, n.reached_at
  from public.usage_threshold_notices n
  join public.metric_definitions m on m.id = n.metric_id
  where n.subscription_id = v_prev.id
    and ((m.kind = 'fixed' and n.period_start = '-infinity')
         or (m.kind = 'rolling' and n.period_start = v_rolling_start));

  -- the live holds of the carried counters move with them, each recorded on its new subscription as its reserve was
  -- (the ledger row is what a replay of the reserve request finds) (added in 20261126000500)
  with moved as (
    update public.usage_reservations r set subscription_id = new.id
    from public.metric_definitions m
    where m.id = r.metric_id and r.subscription_id = v_prev.id and r.status = 'held' and r.expires_at > new.created_at
      and ((m.kind = 'fixed' and r.counter_key = '-infinity')
           or (m.kind = 'rolling' and r.counter_key = v_rolling_start))
    returning r.id, r.metric_id, r.counter_key, r.period_start, r.period_end, r.client_req_id, r.amount, r.ttl_seconds,
              r.expires_at
  ), counted as (
    select h.*, sum(h.amount) over (partition by h.metric_id, h.counter_key) as reserved
    from moved h
  )
  insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                   period_start, period_end, client_req_id, details, created_at)
  select public.quota_ledger_id(new.created_at), new.id, h.metric_id, 'reserved', h.amount, 0, coalesce(c.used, 0),
         h.reserved, public.metering_effective_limit(new.id, new.tier_id, h.metric_id, h.counter_key),
         h.period_start, h.period_end, h.client_req_id,
         jsonb_build_object('ttlSeconds', h.ttl_seconds, 'reservationId', h.id, 'expiresAt', h.expires_at,
                            'fromSubscriptionId', v_prev.id),
         new.created_at
  from counted h
  left join public.usage_counters c
    on c.subscription_id = new.id and c.metric_id = h.metric_id and c.period_start = h.counter_key
  order by h.metric_id, h.expires_at, h.id;
  return null;
end
$$;

-- As in 20261126000100, refusing another agent's price, and with a first sighting that leaves the live free
-- subscription as it is (both marked).
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
  -- a price of another agent's tier (a plan switch that a portal configuration or the Dashboard allowed) is no tier
  -- of this subscription: written, the row would hold another agent's tier under its own agent (changed in
  -- 20261126000500)
  if found and v_row.agent_id <> v_tier.agent_id then
    return query select 'unknown_price'::text, v_row.id;
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

revoke execute on function public.subscription_note_access() from public, anon, authenticated;
