-- Settling an expired hold takes the counter's lock first, also when a read or a replayed reserve settles it.
--
-- The lock order of every usage write is the counter, then its holds (20261123000500_reservations.sql), and the group
-- commit sorts a batch's calls by counter so that batches never wait for each other in a cycle. Two paths broke it:
-- a read of a held reservation past its expiry (GET /me/usage/{agentId}/reservations/{id}) and a replay of the reserve
-- that made it both settle the hold (an UPDATE of its row and an `expired` ledger row) without the counter's lock.
-- Batch A reading hold R and then committing hold R2 of the same counter, beside batch B committing R:
--   A locks R's row (the read settles it); B locks the counter and waits for R; A's commit of R2 waits for the
--   counter: a deadlock, and PostgreSQL aborts one batch after deadlock_timeout (all its calls retried one by one).
-- Found by a hostile review: three cheap requests stalled both batches in flight of an instance. Now these paths take
-- the counter first, only when the hold is expired (a read of a live hold still writes nothing and locks nothing).
-- Both functions are restated whole from 20261125000100_status_rules.sql with only that change (marked).

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
    perform public.metering_settle_expired(array(
      select r.id from public.usage_reservations r
      where r.subscription_id = v_sub_id and r.metric_id = v_metric_id and r.counter_key = v_key
        and r.status = 'held' and r.expires_at <= p_now), p_now);
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
  v_outcome text; v_replayed boolean := false; v_original jsonb;
begin
  if p_action is null or p_action not in ('commit', 'release', 'read') then
    raise exception 'unknown reservation action %', p_action using errcode = '22023';
  end if;
  if p_action = 'commit' and (p_amount is null or p_amount < 0) then
    raise exception 'a commit needs an amount >= 0' using errcode = '22023';
  end if;

  select s.id, s.tier_id into v_sub_id, v_tier_id
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
  if not found then
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
    end if;
    if v_res.status = 'held' and v_res.expires_at <= p_now then
      perform public.metering_settle_expired(array[v_res.id], p_now);
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
