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
--   4. Usage calls in flight on the old subscription (they saw it live before its cancel committed) raced the carry:
--      a commit or reserve committing while the restart ran counted on the canceled subscription only, a commit
--      that locked its counter after the move wrote onto a counter that did not exist, and the move could deadlock
--      with a batch (it locked holds before counters). Now the carry first takes every counter of the old
--      subscription such a call could write (each metric's fixed counter and its rolling one of the current period,
--      created at 0 when missing, and every existing one), in the batches' lock order (metric slug), and marks them
--      `continued`: a call holding one finishes first and is carried; a call that comes later is refused with
--      SQLSTATE 40001 by usage_counters_refuse_continued (while its subscription stays canceled), and the group
--      commit sends it again, to the live subscription.
--   5. Only a subscription that grants access continues one, when it is written or when it first gains access (a
--      paid one recorded incomplete, once paid): before, an unpaid or ended Stripe subscription took the holds.
-- Also: a subscription whose price Stripe switched to another agent's tier's price was written with that tier under
-- its own agent (the pending tier was checked for this, the tier itself not); now a row already written for it keeps
-- its tier, grants no access while the price is not its own ('incomplete' where Stripe says active or past_due: the
-- user does not pay for that tier), and takes the rest (period, cancellation, the end), and the outcome is
-- 'unknown_price'; the same for a price no tier has (before, such a row was never written again, active for good).
-- Rows from before this migration count as having granted access (as they all did for 20261126000300).
-- (Amended in place before release, after a race review of the first version.)

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

alter table public.usage_counters add column continued boolean not null default false;

create function public.usage_counter_refuse_continued() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if exists (select 1 from public.subscriptions s where s.id = old.subscription_id and s.status = 'canceled') then
    raise exception 'the usage counter of subscription % was carried to a new subscription', old.subscription_id
      using errcode = '40001', hint = 'send the call again: it now goes to the live subscription';
  end if;
  -- live again (Stripe made a canceled subscription active again): its counters are its own once more
  new.continued := false;
  return new;
end
$$;

create trigger usage_counters_refuse_continued before update on public.usage_counters
  for each row when (old.continued) execute function public.usage_counter_refuse_continued();

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

-- As in 20261126000300, run only for a subscription that grants access, with the old counters taken first, and with
-- the notices and the holds of the carried counters (all marked).
create or replace function public.subscription_continue_usage() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_prev record;
  v_at timestamptz;
  v_prev_key timestamptz;
  v_next_key timestamptz;
  v_rolling_start timestamptz;
  v_rolling_end timestamptz;
begin
  -- when it is written granting access, or when it first does (added in 20261126000500)
  if not new.granted_access or (tg_op = 'UPDATE' and old.granted_access) then
    return null;
  end if;
  v_at := case when tg_op = 'INSERT' then new.created_at else new.updated_at end;
  select * into v_prev from public.subscription_predecessor(new.user_id, new.agent_id, new.id);
  if not found then
    return null;
  end if;
  if tg_op = 'INSERT' and new.stripe_subscription_id is null and v_prev.free_cycle then
    select b.period_start, b.period_end into v_rolling_start, v_rolling_end
    from public.billing_period(new.current_period_start, null, true, v_at) b;
  end if;

  -- every counter of the old subscription a call still in flight could write, taken in the batches' lock order and
  -- marked continued: such a call that holds one finishes first (what it wrote is read below); one that comes later
  -- is refused with 40001 and sent again by the group commit, to the new subscription (added in 20261126000500)
  -- (the rolling period at this time, and the one a call from an instance whose clock runs a few minutes ahead
  -- would count in)
  select b.period_start, b2.period_start into v_prev_key, v_next_key
  from public.subscriptions s
  cross join lateral public.billing_period(s.current_period_start, s.current_period_end, s.stripe_subscription_id is null, v_at) b
  cross join lateral public.billing_period(s.current_period_start, s.current_period_end, s.stripe_subscription_id is null,
                                           v_at + interval '5 minutes') b2
  where s.id = v_prev.id;
  insert into public.usage_counters as c (subscription_id, metric_id, period_start, used, updated_at, continued)
  select v_prev.id, k.metric_id, k.key, 0, v_at, true
  from (select m.id as metric_id, m.slug, key
          from public.metric_definitions m
          cross join lateral unnest(case when m.kind = 'fixed' then array['-infinity'::timestamptz]
                                         else array[v_prev_key, v_next_key] end) as key
         where m.agent_id = new.agent_id
        union
        select c2.metric_id, m2.slug, c2.period_start
          from public.usage_counters c2 join public.metric_definitions m2 on m2.id = c2.metric_id
         where c2.subscription_id = v_prev.id) k
  where k.key is not null
  order by k.slug, k.key
  on conflict (subscription_id, metric_id, period_start) do update set continued = true where not c.continued;

  with carried as (
    insert into public.usage_counters (subscription_id, metric_id, period_start, used, updated_at)
    select new.id, c.metric_id, c.period_start, c.used, v_at
    from public.usage_counters c
    join public.metric_definitions m on m.id = c.metric_id
    where c.subscription_id = v_prev.id and c.used > 0
      and ((m.kind = 'fixed' and c.period_start = '-infinity')
           or (m.kind = 'rolling' and c.period_start = v_rolling_start))
    returning metric_id, period_start, used
  )
  insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                   period_start, period_end, details, created_at)
  select public.quota_ledger_id(v_at), new.id, k.metric_id, 'carried_over', k.used, k.used, k.used, 0,
         public.metering_effective_limit(new.id, new.tier_id, k.metric_id, k.period_start),
         case when k.period_start = '-infinity' then new.created_at else v_rolling_start end,
         case when k.period_start = '-infinity' then null else v_rolling_end end,
         jsonb_build_object('fromSubscriptionId', v_prev.id), v_at
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
    where m.id = r.metric_id and r.subscription_id = v_prev.id and r.status = 'held' and r.expires_at > v_at
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
  select public.quota_ledger_id(v_at), new.id, h.metric_id, 'reserved', h.amount, 0, coalesce(c.used, 0),
         h.reserved, public.metering_effective_limit(new.id, new.tier_id, h.metric_id, h.counter_key),
         h.period_start, h.period_end, h.client_req_id,
         jsonb_build_object('ttlSeconds', h.ttl_seconds, 'reservationId', h.id, 'expiresAt', h.expires_at,
                            'fromSubscriptionId', v_prev.id),
         v_at
  from counted h
  left join public.usage_counters c
    on c.subscription_id = new.id and c.metric_id = h.metric_id and c.period_start = h.counter_key
  order by h.metric_id, h.expires_at, h.id;
  return null;
end
$$;

-- and when a subscription first gains access, not only when it is written (changed in 20261126000500)
drop trigger subscriptions_continue_usage on public.subscriptions;
create trigger subscriptions_continue_usage after insert or update of status on public.subscriptions
  for each row execute function public.subscription_continue_usage();

-- As in 20261126000100, keeping a written row's tier against another agent's price or an unknown one, and with a first
-- sighting that leaves the live free subscription as it is (both marked).
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

revoke execute on function public.subscription_note_access() from public, anon, authenticated;
revoke execute on function public.usage_counter_refuse_continued() from public, anon, authenticated;
