-- A counter holds at most 1,000 live holds (found by a hostile review, review 03 of limits).
--
-- Every quota check of a counter sums its live holds (public.metering_live_holds: one index entry per hold, in every
-- increment, reserve, commit, release and usage read), and nothing limited how many a counter had. A hold lives up
-- to ttlSeconds = 3,600, so an agent reserving on an unlimited metric (or one unit at a time of a large quota) kept
-- e.g. 60,000 live holds on one counter: each of its usage calls then read 60,000 entries (some 20 ms of the
-- database), inside the group commit's transaction of up to 500 calls, two in flight per instance, and other agents'
-- calls waited 4.1-7.8 s behind a wave of them (PostgreSQL 15 on the 2-core VM, the review's test). 20261126002000
-- bounded the EXPIRED holds a call reads; this bounds the LIVE ones.
--
-- Now a reserve is refused when its counter already has 1,000 live holds: outcome 'live_holds_limit', which the
-- service answers 429 RATE_LIMITED with Retry-After = the seconds until the counter's oldest live hold expires (the
-- earliest a hold frees room by itself; a commit or release frees one at once), details { maxLiveHolds, metric }.
--   - Counted under the counter's row lock (taken first, as before), so concurrent reserves on one counter cannot
--     both take the last slot; with a capped count on usage_reservations_held_by_expiry_idx (the live range of the
--     counter, at most 1,000 entries read): nothing to speak of when a counter has few holds (one index descent
--     finding them), and never more than the 1,000 the live-holds sum reads anyway at the limit. A refused reserve
--     skips that sum and the quota; the oldest live hold is the first entry of the same range.
--   - Nothing is stored for the refusal, no ledger row and no hold (decision): it is not the idempotent outcome of
--     its clientReqId, so a retry with the same clientReqId after holds expired or were released is judged afresh
--     and can pass, where a recorded refusal would replay the 429 for good. A QUOTA_EXCEEDED refusal is recorded
--     (`reserve_denied`) and replays, as the contract has every usage result replay; this one is a RATE_LIMITED, which
--     a client retries after Retry-After, with the same clientReqId as every retry of a usage call (docs/errors.md),
--     and a recorded one would never pass. A reserve whose clientReqId already has an outcome replays it as before,
--     limit or not: that lookup comes before the count, and a twin with the same clientReqId that committed while
--     this call waited for the counter lock is found again before refusing (then the path below replays it).
--   - Why 1,000: the bound of what one usage call reads of holds, the same as the 1,000 expired holds a transaction
--     settles (20261126002000); far above what an agent needs at once on one user's counter (1,000 actions in flight
--     for one user and metric), and at the limit a quota check reads 1,000 index entries (well under a millisecond)
--     rather than 60,000.
--   - Only reserves are limited: increments, commits and releases take no hold, so they keep working at the limit
--     (and a commit or release makes room for one more). Holds carried to a new subscription of the user
--     (20261126000300) move with their counter and are not refused: they were admitted under this limit.
--   - Counters that already have more live holds when this is applied keep them until they expire (an hour at most);
--     no reserve adds to them meanwhile.
-- Both ways of reserving go through public.metering_reserve: the single call, and the group commit's batch
-- (public.metering_batch_as_bearer -> public.metering_reservation_as_bearer -> public.metering_reserve), so this one
-- function is the whole change.
--
-- metering_reserve restated whole from 20261126002000_expired_holds_settle_within_a_budget.sql with only that change
-- (marked "added in 20261126002100").

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
  -- the most live holds a counter may have, and what this counter has (counted up to that) (added in 20261126002100)
  c_max_live_holds constant integer := 1000;
  v_live_holds integer;
  v_oldest_expiry timestamptz;
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
    -- At most c_max_live_holds live holds per counter (added in 20261126002100): counted under the counter's lock
    -- taken above, reading at most that many entries of the live range of usage_reservations_held_by_expiry_idx.
    -- The refusal stores nothing (no ledger row, no hold), so it is not this clientReqId's outcome: a retry with it
    -- once a hold expired or was settled is judged afresh. A twin with this clientReqId that committed while this
    -- call waited for the lock is replayed instead (the ledger insert below finds its row).
    v_live_holds := (select count(*) from (
      select 1 from public.usage_reservations r
      where r.subscription_id = v_sub_id and r.metric_id = v_metric_id and r.counter_key = v_key
        and r.status = 'held' and r.expires_at > p_now
      limit c_max_live_holds) x);
    if v_live_holds >= c_max_live_holds then
      if not exists (select 1 from public.quota_ledger l
                     where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id) then
        -- the earliest a hold of this counter frees room by itself: its first live entry in expiry order
        select r.expires_at into v_oldest_expiry from public.usage_reservations r
        where r.subscription_id = v_sub_id and r.metric_id = v_metric_id and r.counter_key = v_key
          and r.status = 'held' and r.expires_at > p_now
        order by r.expires_at
        limit 1;
        -- amount: the limit; expires_at: when the oldest live hold expires
        return query select 'live_holds_limit'::text, false, null::uuid, null::text, c_max_live_holds::bigint, null::bigint,
                            v_oldest_expiry, null::timestamptz, p_metric_slug, v_kind, v_used, null::bigint, null::bigint,
                            v_start, v_end, p_amount, null::jsonb;
        return;
      end if;
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
