-- A retry of a reservation call after a restart is a replay too, not a 404 or a second hold (found by a hostile
-- review, review 22).
--
-- Usage continues across a cancel-and-restart (20261126000300, 20261126000500): the counters and the LIVE holds move
-- to the new subscription, and 20261126001000 made an increment's or decrement's retry look its clientReqId up along
-- subscriptions.continued_from. Reservations did not: a hold settled (committed, released, expired) before the
-- restart stays with the old subscription, with the ledger row of its reserve. So an agent that lost the answer of a
-- commit or release and retried it after the user canceled and started again got 404 (the contract: "commit and
-- release are idempotent"), and the recovery docs/metering.md gives ("reserve again with the same clientReqId, amount
-- and ttl: the replay answers the same reservation") made a NEW hold, whose commit counted the same work twice.
--
-- Now:
--   - metering_settle_reservation: a reservation id not on the caller's subscription is looked up on the
--     subscriptions it continued (the continued_from chain, walked as public.metering_continued_entry walks it:
--     recursive, depth-bounded). Only a hold that is no longer live is taken there: committed, released, expired, or
--     still marked held but past its expiry (it ran out before the restart and nobody settled it yet: it counts
--     nowhere). It answers as a settled hold does on its own subscription: a commit of a committed one with the same
--     amount replays it, another amount is idempotency_conflict; a release of a released one replays; a read is ok;
--     an expired one is 'expired' (422 INVALID_STATE); anything else invalid_state. Nothing is written on this path
--     (the old subscription's counters are carried and refuse writes). A live hold left on an old subscription (a
--     rolling period the new subscription does not continue) is still not found, as before.
--   - metering_reserve: a clientReqId not on the caller's subscription is looked up along the chain with
--     public.metering_continued_entry, before the counter lock (unless its hold is still live there: that one did not
--     move and cannot be settled from here, so the retry makes a new hold, as before), and a hit goes to the existing replay path: the same
--     amount and ttl answer the same reservation as it is now (replayed), a stored reserve_denied replays its 429,
--     anything else is idempotency_conflict. The replay path's settling of an expired hold now acts only on a hold of
--     the caller's subscription: a hold that ran out on an old subscription is answered expired (its state reads it
--     so) without locking or writing that subscription's counter, which is marked continued and would refuse the
--     write with 40001 for as long as that subscription stays canceled.
-- The common path costs nothing more: the chain is walked only when the id or key is not on the subscription itself
-- and the subscription continued another.
-- metering_settle_reservation (from 20261126000400_hold_expiry_never_goes_back.sql) and metering_reserve (from
-- 20261126002100_live_holds_have_a_bound.sql) are restated whole with only these changes (marked
-- "(changed in 20261126002700)").

create or replace function public.metering_settle_reservation(
  p_user_id text, p_agent_id uuid, p_reservation_id uuid, p_action text, p_amount bigint, p_now timestamptz
) returns table (
  outcome text, replayed boolean,
  reservation_id uuid, status text, amount bigint, committed_amount bigint, expires_at timestamptz, created_at timestamptz,
  metric text, kind text, used bigint, reserved bigint, quota_limit bigint, period_start timestamptz, period_end timestamptz,
  requested bigint, original jsonb
) language plpgsql volatile as $$
#variable_conflict use_column
declare
  v_sub_id uuid; v_tier_id uuid;
  v_res public.usage_reservations;
  v_used bigint;
  v_seen timestamptz := p_now;
  v_outcome text; v_replayed boolean := false; v_original jsonb;
  v_continued_from uuid; -- (changed in 20261126002700)
begin
  if p_action is null or p_action not in ('commit', 'release', 'read') then
    raise exception 'unknown reservation action %', p_action using errcode = '22023';
  end if;
  if p_action = 'commit' and (p_amount is null or p_amount < 0) then
    raise exception 'a commit needs an amount >= 0' using errcode = '22023';
  end if;

  select s.id, s.tier_id, s.continued_from into v_sub_id, v_tier_id, v_continued_from -- (changed in 20261126002700)
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and public.subscription_grants_access(s.status)
  limit 1;
  if v_sub_id is null then
    return query select 'subscription_required'::text, false, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::text, null::text, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::jsonb;
    return;
  end if;

  -- only a reservation of this very subscription: another user's, or another agent's, is not found
  select * into v_res from public.usage_reservations r where r.id = p_reservation_id and r.subscription_id = v_sub_id;
  -- or one no longer live on a subscription this one continued: a retry after a restart is a replay (its live holds
  -- moved here; one still marked held there ran out before the restart and counts nowhere). Read only: nothing below
  -- writes it, its status here is never 'held'. The chain is walked as public.metering_continued_entry walks it
  -- (changed in 20261126002700, to the end if)
  if not found and v_continued_from is not null then
    select * into v_res from public.usage_reservations r
    where r.id = p_reservation_id and (r.status <> 'held' or r.expires_at <= p_now)
      and r.subscription_id in (
        with recursive chain (id, continued_from, depth) as (
          select s.id, s.continued_from, 1 from public.subscriptions s where s.id = v_continued_from
          union
          select s.id, s.continued_from, c.depth + 1 from chain c join public.subscriptions s on s.id = c.continued_from
           where c.depth < 100
        )
        select c.id from chain c);
    if found and v_res.status = 'held' then
      v_res.status := 'expired';
    end if;
  end if;
  if v_res.id is null then -- (changed in 20261126002700)
    return query select 'reservation_not_found'::text, false, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::text, null::text, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::jsonb;
    return;
  end if;

  if v_res.status = 'held' then
    -- a read writes only to settle an expired hold; then it takes the locks in the same order
    if p_action <> 'read' or v_res.expires_at <= p_now then
      -- lock order: the counter, then the hold; then look again, another call may have settled it meanwhile
      perform public.metering_counter_for_update(v_res.subscription_id, v_res.metric_id, v_res.counter_key, p_now);
      select * into v_res from public.usage_reservations r where r.id = p_reservation_id for update;
      -- time never goes back on a counter: a write to it at a later time has already treated the hold as expired
      -- (changed in 20261126000400)
      select greatest(p_now, c.updated_at) into v_seen from public.usage_counters c
      where c.subscription_id = v_res.subscription_id and c.metric_id = v_res.metric_id and c.period_start = v_res.counter_key;
    end if;
    if v_res.status = 'held' and v_res.expires_at <= v_seen then
      perform public.metering_settle_expired(array[v_res.id], v_seen);
      v_res.status := 'expired';
    end if;
  end if;

  if p_action = 'read' then
    v_outcome := 'ok';
  elsif v_res.status = 'held' then
    if p_action = 'commit' and p_amount > v_res.amount then
      v_outcome := 'amount_over_hold';
    elsif p_action = 'commit' then
      update public.usage_counters c set used = c.used + p_amount, updated_at = p_now
      where c.subscription_id = v_res.subscription_id and c.metric_id = v_res.metric_id and c.period_start = v_res.counter_key
      returning c.used into v_used;
      update public.usage_reservations r set status = 'committed', committed_amount = p_amount, settled_at = p_now
      where r.id = v_res.id;
      insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                       period_start, period_end, details, created_at)
      values (public.quota_ledger_id(p_now), v_res.subscription_id, v_res.metric_id, 'committed', p_amount, p_amount, v_used,
              public.metering_live_holds(v_res.subscription_id, v_res.metric_id, v_res.counter_key, p_now),
              public.metering_effective_limit(v_sub_id, v_tier_id, v_res.metric_id, v_res.counter_key),
              v_res.period_start, v_res.period_end,
              jsonb_build_object('reservationId', v_res.id, 'held', v_res.amount), p_now);
      v_outcome := 'ok';
    else
      update public.usage_reservations r set status = 'released', settled_at = p_now where r.id = v_res.id;
      insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                       period_start, period_end, details, created_at)
      select public.quota_ledger_id(p_now), v_res.subscription_id, v_res.metric_id, 'released', v_res.amount, 0, coalesce(c.used, 0),
             public.metering_live_holds(v_res.subscription_id, v_res.metric_id, v_res.counter_key, p_now),
             public.metering_effective_limit(v_sub_id, v_tier_id, v_res.metric_id, v_res.counter_key),
             v_res.period_start, v_res.period_end, jsonb_build_object('reservationId', v_res.id), p_now
      from (select 1) one
      left join public.usage_counters c
        on c.subscription_id = v_res.subscription_id and c.metric_id = v_res.metric_id and c.period_start = v_res.counter_key;
      v_outcome := 'ok';
    end if;
  elsif v_res.status = 'expired' then
    v_outcome := 'expired';
  elsif p_action = 'commit' and v_res.status = 'committed' then
    if v_res.committed_amount = p_amount then
      v_outcome := 'ok'; v_replayed := true;
    else
      v_outcome := 'idempotency_conflict';
      v_original := jsonb_build_object('operation', 'commit', 'amount', v_res.committed_amount);
    end if;
  elsif p_action = 'release' and v_res.status = 'released' then
    v_outcome := 'ok'; v_replayed := true;
  else
    v_outcome := 'invalid_state';
  end if;

  return query select v_outcome, v_replayed, s.*, case when p_action = 'commit' then p_amount end, v_original
               from public.metering_reservation_state(v_res.id, p_now) s;
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
