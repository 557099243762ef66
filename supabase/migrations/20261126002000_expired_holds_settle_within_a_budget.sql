-- The expired holds a transaction settles inline have a bound, and a reserve reads no more of them than it settles
-- (found by a hostile review, review 42).
--
-- A reserve settles expired holds of its counter under the counter's lock, inside the group commit's one transaction
-- (up to 500 calls, two transactions in flight per instance), and 20261126000600 bounded that to 100 per reserve. But
-- the reserve first gathered the ids of EVERY expired hold of its counter and handed them over, and 100 was a bound
-- per call, not per batch: on a counter where an agent had let N holds expire, each reserve of a batch walked N, N-100,
-- N-200, ... ids and settled 100 more, so a batch of 500 reserves wrote up to 50,000 `expired` ledger rows before it
-- answered, and every other agent's usage call in that batch or queued behind it waited: 3.6-9.8 s instead of 12 ms
-- (tests/metering/expired-holds-stall.pg-only.test.ts, PostgreSQL 15 on the 2-core VM; 6.8-9.4 s in the review). The
-- sum of the counter's live holds (metering_live_holds, in every increment, reserve, commit and release) walked the
-- expired holds too: its index keyed the counter only, with expires_at a mere included column, so each quota check
-- read all N entries to drop them (9 ms at N = 60,000). One transaction of 50 reserves on such a counter took 2.3 s;
-- now one of 500 takes 0.17-0.25 s, settling 1,000 of them (psql, same VM).
--
-- Now:
--   - one index serves both reads, keyed by counter and then expires_at: the live holds are the range after p_now
--     (the expired ones are never read), the expired holds the range up to it, oldest first, so a reserve's
--     `order by expires_at limit` stops after the ids it settles. It replaces usage_reservations_held_idx (the same
--     rows and columns, expires_at moved into the key), so a hold's writes maintain no more indexes than before;
--   - a reserve still settles at most 100 expired holds of its counter, and a transaction at most 1,000 in all
--     through its reserves: a transaction-local count (set_config(..., true), gone at commit or rollback), read in
--     the reserve's one gather statement, so a batch of 500 reserves on such counters settles 1,000 and the rest of
--     its reserves settle none. The holds left are settled by later transactions' reserves and by the housekeeping's
--     sweep (metering_expire_reservations, 1,000 per run; unchanged).
-- Nothing else changes. Inline settling only keeps the ledger's `expired` rows (and their reservation.expired
-- webhooks) and the holds' status close to the time: no quota check depends on it (each counts only holds with
-- expires_at after its time), and a commit judges its hold's expiry at the counter's latest time, which every
-- reserve moves (20261126001700), settled or not. A commit, release, read or replay of an expired hold still settles
-- that one hold, outside the budget (one per call). A reserve on a counter without expired holds runs the same
-- statements as before: the one gather, now with its limit, finding nothing.
--
-- metering_reserve restated whole from 20261126000200_hold_settling_lock_order.sql with only that change (marked).

-- The live holds of a counter (expires_at after p_now) and its expired holds oldest first (up to p_now), each a range.
create index usage_reservations_held_by_expiry_idx on public.usage_reservations (subscription_id, metric_id, counter_key, expires_at)
  include (amount) where status = 'held';
drop index public.usage_reservations_held_idx;

create or replace function public.metering_reserve(
  p_user_id text, p_agent_id uuid, p_metric_slug text, p_client_req_id text, p_amount bigint, p_ttl_seconds integer,
  p_now timestamptz
) returns table (
  outcome text, replayed boolean,
  reservation_id uuid, status text, amount bigint, committed_amount bigint, expires_at timestamptz, created_at timestamptz,
  metric text, kind text, used bigint, reserved bigint, quota_limit bigint, period_start timestamptz, period_end timestamptz,
  requested bigint, original jsonb
) language plpgsql volatile as $$
#variable_conflict use_column
declare
  v_sub_id uuid; v_tier_id uuid; v_created timestamptz; v_anchor timestamptz; v_stored_end timestamptz; v_computed boolean;
  v_metric_id uuid; v_kind text;
  v_start timestamptz; v_end timestamptz; v_key timestamptz;
  v_used bigint; v_reserved bigint; v_limit bigint; v_ok boolean;
  v_id uuid; v_expires timestamptz;
  v_expired uuid[]; -- (changed in 20261126002000)
  v_prev record;
begin
  if p_amount is null or p_amount < 1 then
    raise exception 'amount must be a positive integer' using errcode = '22023';
  end if;
  if p_ttl_seconds is null or p_ttl_seconds < 1 or p_ttl_seconds > 3600 then
    raise exception 'ttl must be 1..3600 seconds' using errcode = '22023';
  end if;
  if p_client_req_id is null then
    raise exception 'a reserve needs a clientReqId' using errcode = '22023';
  end if;

  select s.id, s.tier_id, s.created_at, s.current_period_start, s.current_period_end, s.stripe_subscription_id is null
    into v_sub_id, v_tier_id, v_created, v_anchor, v_stored_end, v_computed
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and public.subscription_grants_access(s.status)
  limit 1;
  if v_sub_id is null then
    return query select 'subscription_required'::text, false, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::text, null::text, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::jsonb;
    return;
  end if;

  select m.id, m.kind into v_metric_id, v_kind
  from public.metric_definitions m where m.agent_id = p_agent_id and m.slug = p_metric_slug;
  if v_metric_id is null then
    return query select 'metric_not_found'::text, false, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::text, null::text, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::jsonb;
    return;
  end if;

  select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
  from public.quota_ledger l
  where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;

  if not found then
    if v_kind = 'rolling' then
      select b.period_start, b.period_end into v_start, v_end from public.billing_period(v_anchor, v_stored_end, v_computed, p_now) b;
      v_key := v_start;
    else
      v_start := v_created; v_end := null; v_key := '-infinity';
    end if;

    -- the counter lock first (the same lock increments take), then the holds of this counter
    v_used := public.metering_counter_for_update(v_sub_id, v_metric_id, v_key, p_now);
    -- The oldest expired holds of this counter, only as many as this reserve settles: at most 100, and at most what
    -- is left of this transaction's 1,000 (the count 'metering.expired_settled', kept below; unset means none yet).
    -- A LIMIT of 0 reads nothing. They are counted, then settled, all of them: this LIMIT is the one bound per
    -- reserve (changed in 20261126002000).
    v_expired := array(
      select r.id from public.usage_reservations r
      where r.subscription_id = v_sub_id and r.metric_id = v_metric_id and r.counter_key = v_key
        and r.status = 'held' and r.expires_at <= p_now
      order by r.expires_at
      limit least(100, 1000 - coalesce(nullif(current_setting('metering.expired_settled', true), '')::integer, 0)));
    if cardinality(v_expired) > 0 then
      perform set_config('metering.expired_settled',
                         (coalesce(nullif(current_setting('metering.expired_settled', true), '')::integer, 0)
                          + cardinality(v_expired))::text,
                         true);
      perform public.metering_settle_expired(v_expired, p_now, cardinality(v_expired));
    end if;
    v_reserved := public.metering_live_holds(v_sub_id, v_metric_id, v_key, p_now);
    v_limit := public.metering_effective_limit(v_sub_id, v_tier_id, v_metric_id, v_key);
    v_ok := v_limit is null or v_used + v_reserved + p_amount <= v_limit;
    v_id := gen_random_uuid();
    v_expires := p_now + make_interval(secs => p_ttl_seconds);

    insert into public.quota_ledger as l (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                          period_start, period_end, client_req_id, details, created_at)
    values (public.quota_ledger_id(p_now), v_sub_id, v_metric_id, case when v_ok then 'reserved' else 'reserve_denied' end,
            p_amount, 0, v_used, v_reserved + case when v_ok then p_amount else 0 end, v_limit, v_start, v_end, p_client_req_id,
            case when v_ok then jsonb_build_object('ttlSeconds', p_ttl_seconds, 'reservationId', v_id, 'expiresAt', v_expires)
                 else jsonb_build_object('ttlSeconds', p_ttl_seconds) end,
            p_now)
    on conflict (metric_id, subscription_id, client_req_id) do nothing;
    if found then
      if v_ok then
        insert into public.usage_reservations (id, subscription_id, metric_id, counter_key, period_start, period_end, client_req_id,
                                               amount, ttl_seconds, status, expires_at, created_at)
        values (v_id, v_sub_id, v_metric_id, v_key, v_start, v_end, p_client_req_id, p_amount, p_ttl_seconds, 'held', v_expires, p_now);
        return query select 'ok'::text, false, s.*, p_amount, null::jsonb from public.metering_reservation_state(v_id, p_now) s;
      else
        return query select 'quota_exceeded'::text, false, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                            null::timestamptz, p_metric_slug, v_kind, v_used, v_reserved, v_limit, v_start, v_end, p_amount, null::jsonb;
      end if;
      return;
    end if;

    -- a concurrent call with this clientReqId committed first (we waited on the counter lock): its result stands
    select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
    from public.quota_ledger l
    where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;
  end if;

  if v_prev.event in ('reserved', 'reserve_denied') and v_prev.amount = p_amount
     and (v_prev.details ->> 'ttlSeconds')::int = p_ttl_seconds then
    if v_prev.event = 'reserved' then
      v_id := (v_prev.details ->> 'reservationId')::uuid;
      -- settling an expired hold writes it: the counter first, as everywhere (the lock order at the top of this file)
      perform public.metering_counter_for_update(r.subscription_id, r.metric_id, r.counter_key, p_now)
      from public.usage_reservations r where r.id = v_id and r.status = 'held' and r.expires_at <= p_now;
      perform public.metering_settle_expired(array[v_id], p_now);
      return query select 'ok'::text, true, s.*, v_prev.amount, null::jsonb from public.metering_reservation_state(v_id, p_now) s;
    else
      return query select 'quota_exceeded'::text, true, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                          null::timestamptz, p_metric_slug, v_kind, v_prev.used, coalesce(v_prev.reserved, 0), v_prev.quota_limit,
                          v_prev.period_start, v_prev.period_end, v_prev.amount, null::jsonb;
    end if;
  else
    return query select 'idempotency_conflict'::text, true, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, p_metric_slug, v_kind, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, public.metering_original_request(v_prev.event, v_prev.amount, v_prev.details);
  end if;
end
$$;
