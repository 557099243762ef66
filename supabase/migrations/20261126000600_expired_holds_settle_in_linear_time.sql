-- Settling expired holds costs time linear in their number, and a reserve settles at most 100 of them.
--
-- metering_settle_expired wrote each expired hold's ledger row with metering_live_holds of its counter, and that sum
-- read every hold the statement was marking (its own update is not visible to it; the expiry filter drops them from
-- the sum, but the index scan still walks them): N expired holds on one counter cost N scans of N rows. A reserve
-- settles the expired holds of its counter under the counter's lock, inside the group commit's one transaction, so
-- an agent that let N holds expire together stalled every agent's usage calls in that batch: 6.1 s at N = 8,000
-- (0.4 s at 2,000; found by a hostile review, PostgreSQL 15 on the 2-core VM). Now the live holds are summed once
-- per counter, the holds are looked up by key, and a call settles at most p_limit of the holds it is given: 100 by
-- default (what a reserve settles in the batch), 1,000 for the scheduler's sweep (metering_expire_reservations).
-- Nothing depends on a hold being marked expired (every quota check counts only holds with expires_at after its
-- time), so the rest wait for the next reserve on that counter or the sweep. `node scripts/bench/expired-holds.ts`
-- (one reserve on a counter with N expired holds, no statistics yet, as right after an agent made them):
-- 457 / 5,867 ms at N = 2,000 / 8,000 before; now 13 / 13 / 25 ms at 2,000 / 8,000 / 32,000 (100 settled; with a
-- limit of 1,000, 58 / 59 / 73 ms).
-- Same rows and ledger as before otherwise.

drop function public.metering_settle_expired(uuid[], timestamptz);
create function public.metering_settle_expired(p_reservation_ids uuid[], p_now timestamptz, p_limit integer default 100)
returns integer language plpgsql volatile as $$
declare
  v_count integer;
begin
  if p_reservation_ids is null or cardinality(p_reservation_ids) = 0 then
    return 0;
  end if;
  with due as (
    -- looked up one by one (the primary key): `id = any (p_reservation_ids)` was a scan comparing each row with
    -- each element when the table's statistics were old, N times N again
    select r.id
    from unnest(p_reservation_ids[1:greatest(coalesce(p_limit, 100), 0)]) as given (id)
    join public.usage_reservations r on r.id = given.id
    where r.status = 'held' and r.expires_at <= p_now
  ), expired as (
    update public.usage_reservations r set status = 'expired', settled_at = p_now
    from due
    where r.id = due.id and r.status = 'held' and r.expires_at <= p_now
    returning r.id, r.subscription_id, r.metric_id, r.counter_key, r.period_start, r.period_end, r.amount, r.expires_at
  ), holds as materialized (
    -- materialized: inlined into the insert, the sum ran once per ledger row again
    select k.subscription_id, k.metric_id, k.counter_key,
           public.metering_live_holds(k.subscription_id, k.metric_id, k.counter_key, p_now) as reserved
    from (select distinct e.subscription_id, e.metric_id, e.counter_key from expired e) k
  ), written as (
    insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                     period_start, period_end, details, created_at)
    select public.quota_ledger_id(p_now), e.subscription_id, e.metric_id, 'expired', e.amount, 0, coalesce(c.used, 0),
           h.reserved,
           public.metering_effective_limit(s.id, s.tier_id, e.metric_id, e.counter_key),
           e.period_start, e.period_end,
           jsonb_build_object('reservationId', e.id, 'expiresAt', e.expires_at), p_now
    from expired e
    join holds h on h.subscription_id = e.subscription_id and h.metric_id = e.metric_id and h.counter_key = e.counter_key
    join public.subscriptions s on s.id = e.subscription_id
    left join public.usage_counters c
      on c.subscription_id = e.subscription_id and c.metric_id = e.metric_id and c.period_start = e.counter_key
    order by e.expires_at, e.id
    returning 1
  )
  select count(*)::int into v_count from written;
  return v_count;
end
$$;

create or replace function public.metering_expire_reservations(p_now timestamptz, p_limit integer default 1000)
returns integer language plpgsql volatile as $$
begin
  return public.metering_settle_expired(array(
    select r.id from public.usage_reservations r
    where r.status = 'held' and r.expires_at <= p_now
    order by r.expires_at
    limit greatest(coalesce(p_limit, 1000), 0)
    for update skip locked), p_now, greatest(coalesce(p_limit, 1000), 0));
end
$$;

revoke execute on function public.metering_settle_expired(uuid[], timestamptz, integer) from public, anon, authenticated;
