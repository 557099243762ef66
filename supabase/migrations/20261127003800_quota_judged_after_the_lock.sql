-- An increment or a hold is judged by the tier its subscription is on when it counts, not the one it had when the call
-- began (found by review 20).
--
-- public.metering_increment and public.metering_reserve read the subscription (its tier_id among the rest) in their
-- first statement, then take the counter's row lock, waiting for any other batch or change on that counter, then read
-- the effective limit with the tier_id read before the wait. A tier change committed during that wait (an admin's
-- change-tier, a downgrade Stripe applies at the period's turn, written by the webhook) was not seen: the increment
-- was admitted against the quota of a tier the subscription had left (quota 10 instead of 1: 200 instead of 429),
-- against docs/internals/metering.md ("no increment is ever admitted against a quota that was already lowered").
-- Taking counter locks in the tier change would not help, the tier having been read before the wait.
--
-- Now each reads the subscription's tier_id again right after the counter's lock, in a statement of its own (READ
-- COMMITTED: a new snapshot, which sees a change committed during the wait), and judges with it. A change committing
-- after that read comes after this call in every sense (it committed later, the call holding its counter), as any
-- change after a call. One primary-key read more per new call; replays read nothing more. The period the counter is
-- keyed by is still the one read first: a renewal committing during the wait counts this call in the period that just
-- ended, which it was sent in.
--
-- Both functions restated whole from their latest versions (metering_increment: 20261126001000; metering_reserve:
-- 20261126002700) with only that change (marked). Their privileges stay (create or replace keeps them).

create or replace function public.metering_increment(
  p_user_id text, p_agent_id uuid, p_metric_slug text, p_client_req_id text, p_amount bigint, p_now timestamptz
) returns table (
  outcome text, replayed boolean, kind text, used bigint, quota_limit bigint,
  period_start timestamptz, period_end timestamptz, requested bigint, reserved bigint, original jsonb
) language plpgsql volatile as $$
#variable_conflict use_column
declare
  v_sub_id uuid; v_tier_id uuid; v_created timestamptz; v_anchor timestamptz; v_stored_end timestamptz; v_computed boolean;
  v_metric_id uuid; v_kind text;
  v_start timestamptz; v_end timestamptz; v_key timestamptz;
  v_used bigint; v_reserved bigint; v_limit bigint; v_ok boolean;
  v_prev record;
  v_continued_from uuid; -- (changed in 20261126001000)
begin
  if p_amount is null or p_amount < 1 then
    raise exception 'amount must be a positive integer' using errcode = '22023';
  end if;

  select s.id, s.tier_id, s.created_at, s.current_period_start, s.current_period_end, s.stripe_subscription_id is null,
         s.continued_from -- (changed in 20261126001000)
    into v_sub_id, v_tier_id, v_created, v_anchor, v_stored_end, v_computed, v_continued_from
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and public.subscription_grants_access(s.status)
  limit 1;
  if v_sub_id is null then
    return query select 'subscription_required'::text, false, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::bigint, null::jsonb;
    return;
  end if;

  select m.id, m.kind into v_metric_id, v_kind
  from public.metric_definitions m where m.agent_id = p_agent_id and m.slug = p_metric_slug;
  if v_metric_id is null then
    return query select 'metric_not_found'::text, false, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::bigint, null::jsonb;
    return;
  end if;

  select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
  from public.quota_ledger l
  where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;
  -- and on the subscriptions this one continued: a retry after a restart is a replay -- (changed in 20261126001000)
  if not found and v_continued_from is not null then
    select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
    from public.metering_continued_entry(v_metric_id, v_continued_from, p_client_req_id) l;
  end if;

  if not found then
    if v_kind = 'rolling' then
      select b.period_start, b.period_end into v_start, v_end from public.billing_period(v_anchor, v_stored_end, v_computed, p_now) b;
      v_key := v_start;
    else
      -- a fixed metric counts over the subscription's life: its record shows the subscription's start, no end
      v_start := v_created; v_end := null; v_key := '-infinity';
    end if;

    insert into public.usage_counters as c (subscription_id, metric_id, period_start, used, updated_at)
    values (v_sub_id, v_metric_id, v_key, p_amount, p_now)
    on conflict (subscription_id, metric_id, period_start)
      do update set used = c.used + excluded.used, updated_at = excluded.updated_at
    returning c.used into v_used;

    -- the tier as it is now, read under the counter's lock just taken (changed in 20261127003800)
    select s.tier_id into v_tier_id from public.subscriptions s where s.id = v_sub_id;
    v_limit := public.metering_effective_limit(v_sub_id, v_tier_id, v_metric_id, v_key);
    v_reserved := public.metering_live_holds(v_sub_id, v_metric_id, v_key, p_now);
    v_ok := v_limit is null or v_used + v_reserved <= v_limit;
    if not v_ok then
      update public.usage_counters c set used = c.used - p_amount
      where c.subscription_id = v_sub_id and c.metric_id = v_metric_id and c.period_start = v_key
      returning c.used into v_used;
    end if;

    insert into public.quota_ledger as l (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                          period_start, period_end, client_req_id, created_at)
    values (public.quota_ledger_id(p_now), v_sub_id, v_metric_id, case when v_ok then 'increment' else 'increment_denied' end,
            p_amount, case when v_ok then p_amount else 0 end, v_used, v_reserved, v_limit, v_start, v_end, p_client_req_id, p_now)
    on conflict (metric_id, subscription_id, client_req_id) do nothing;
    if found then
      return query select case when v_ok then 'ok' else 'quota_exceeded' end, false, v_kind, v_used, v_limit, v_start, v_end,
                          p_amount, v_reserved, null::jsonb;
      return;
    end if;

    -- a concurrent call with this clientReqId committed first: its result stands, ours is taken back
    if v_ok then
      update public.usage_counters c set used = c.used - p_amount
      where c.subscription_id = v_sub_id and c.metric_id = v_metric_id and c.period_start = v_key;
    end if;
    select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
    from public.quota_ledger l
    where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;
  end if;

  -- the stored result of this clientReqId: a replay of the same request, or another request under the same key
  if v_prev.event in ('increment', 'increment_denied') and v_prev.amount = p_amount then
    return query select case v_prev.event when 'increment' then 'ok' else 'quota_exceeded' end, true, v_kind,
                        v_prev.used, v_prev.quota_limit, v_prev.period_start, v_prev.period_end, v_prev.amount,
                        coalesce(v_prev.reserved, 0), null::jsonb;
  else
    return query select 'idempotency_conflict'::text, true, v_kind, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::bigint,
                        public.metering_original_request(v_prev.event, v_prev.amount, v_prev.details);
  end if;
end
$$;

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
  v_continued_from uuid; -- (changed in 20261126002700)
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

  select s.id, s.tier_id, s.created_at, s.current_period_start, s.current_period_end, s.stripe_subscription_id is null,
         s.continued_from -- (changed in 20261126002700)
    into v_sub_id, v_tier_id, v_created, v_anchor, v_stored_end, v_computed, v_continued_from -- (changed in 20261126002700)
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
  -- and on the subscriptions this one continued, before the counter lock: a reserve retried after a restart is a
  -- replay of the hold it made there, not a second hold (changed in 20261126002700)
  if not found and v_continued_from is not null then -- (changed in 20261126002700)
    select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev -- (changed in 20261126002700)
    from public.metering_continued_entry(v_metric_id, v_continued_from, p_client_req_id) l; -- (changed in 20261126002700)
    -- A hold still live on the subscription it was made on did not move here: its counter was not carried (a rolling
    -- period this subscription does not continue, or any rolling counter after a paid subscription), so it counts
    -- nowhere here and cannot be committed from here. The retry makes a hold of its own instead of answering one the
    -- agent could never settle (found by the review of this change). PERFORM sets FOUND: no entry.
    if found and v_prev.event = 'reserved' and exists ( -- (changed in 20261126002700, to the end if)
         select 1 from public.usage_reservations r
          where r.id = (v_prev.details ->> 'reservationId')::uuid and r.subscription_id <> v_sub_id
            and r.status = 'held' and r.expires_at > p_now) then
      perform 1 where false;
    end if;
  end if; -- (changed in 20261126002700)

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
    -- the tier as it is now, read under the counter's lock taken above (changed in 20261127003800)
    select s.tier_id into v_tier_id from public.subscriptions s where s.id = v_sub_id;
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
      -- settling an expired hold writes it: the counter first, as everywhere (the lock order at the top of this file);
      -- only a hold of this subscription: one that ran out on a subscription this one continued is answered expired
      -- (its state reads it so) without a write to that subscription's carried counter (changed in 20261126002700)
      if exists (select 1 from public.usage_reservations r -- (changed in 20261126002700)
                 where r.id = v_id and r.subscription_id = v_sub_id and r.status = 'held' and r.expires_at <= p_now) then -- (changed in 20261126002700)
        perform public.metering_counter_for_update(r.subscription_id, r.metric_id, r.counter_key, p_now)
        from public.usage_reservations r where r.id = v_id and r.status = 'held' and r.expires_at <= p_now;
        perform public.metering_settle_expired(array[v_id], p_now);
      end if; -- (changed in 20261126002700)
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
