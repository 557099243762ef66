-- One definition of "the subscriptions this one continued" (the read-through of 20261126002700).
--
-- Usage continues across a cancel-and-restart along subscriptions.continued_from (20261126001000), and two functions
-- walk that chain: metering_continued_entry (a retried increment, decrement or reserve finds its clientReqId on an
-- older subscription) and metering_settle_reservation (a retried commit or release finds its hold there). Each wrote
-- the same recursive walk, with the same depth bound, by hand; a change to one (another bound, a chain that should
-- stop at a subscription of another user) would have left the other walking differently. Now both read
-- public.subscription_continued_chain.
--
-- It is LANGUAGE sql, stable, with no SET clause, so the planner inlines it into the calling statement (a
-- set-returning SQL function meeting those conditions is expanded like a view): the callers' plans are the ones they
-- had. Its body names every object schema-qualified, so it does not depend on the caller's search_path.
-- Behaviour is unchanged: the same rows, in the same order (depth 1 is the subscription continued directly).
-- metering_continued_entry (from 20261126001000_replays_follow_continued_usage.sql) and metering_settle_reservation
-- (from 20261126002700_hold_retries_follow_continued_usage.sql) are restated whole with only the walk replaced
-- (marked "(changed in 20261127000100)").

-- The subscriptions p_continued_from stands for: itself (depth 1), the one it continued (depth 2), and so on.
-- (union, not union all, and a depth bound: a chain never loops, and if one did the walk would still end)
create function public.subscription_continued_chain(p_continued_from uuid)
returns table (subscription_id uuid, depth integer)
language sql stable
as $$
  with recursive chain (id, continued_from, depth) as (
    select s.id, s.continued_from, 1 from public.subscriptions s where s.id = p_continued_from
    union
    select s.id, s.continued_from, c.depth + 1 from chain c join public.subscriptions s on s.id = c.continued_from
     where c.depth < 100
  )
  select c.id, c.depth from chain c
$$;

revoke execute on function public.subscription_continued_chain(uuid) from public, anon, authenticated;

-- The ledger row recorded for (metric, clientReqId) on the nearest of the subscriptions a subscription continued,
-- starting from the one it continued directly. PL/pgSQL, so its statement is planned once per session (20261125000500).
create or replace function public.metering_continued_entry(p_metric_id uuid, p_continued_from uuid, p_client_req_id text)
returns setof public.quota_ledger
language plpgsql stable
set search_path = public, pg_temp
as $$
begin
  return query
    select l.* from public.subscription_continued_chain(p_continued_from) c -- (changed in 20261127000100)
    join public.quota_ledger l on l.metric_id = p_metric_id and l.subscription_id = c.subscription_id -- (changed in 20261127000100)
      and l.client_req_id = p_client_req_id
    order by c.depth
    limit 1;
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
  -- writes it, its status here is never 'held' (changed in 20261126002700, to the end if)
  if not found and v_continued_from is not null then
    select * into v_res from public.usage_reservations r
    where r.id = p_reservation_id and (r.status <> 'held' or r.expires_at <= p_now)
      and r.subscription_id in (
        select c.subscription_id from public.subscription_continued_chain(v_continued_from) c); -- (changed in 20261127000100)
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
