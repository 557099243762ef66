-- The group commit's batches take their counters in one order also across a period boundary (found by a hostile
-- review).
--
-- A batch runs its calls in the order of the counters they lock, so that two batches never wait for each other
-- (20261125000300): agent, user, metric, then clientReqId. But a rolling metric has one counter per period, and a
-- commit, release or read locks its hold's counter, the period the hold was made in. An agent holding units just
-- before a user's period ended and just after could send commits of an old and a new hold in one batch and of
-- another pair, the other way round, in the next: commits have no clientReqId, so each kept its arrival order, each
-- batch locked one period's counter and waited for the other's, and PostgreSQL ended one after deadlock_timeout
-- (a second's stall for every other agent's calls in both batches, and the batch sent again).
--
-- Now, after the metric, calls are ordered by their counter's period, given as a time inside it: a hold's counter key
-- (the period's start) for a commit, release or read, and for an increment, decrement or reserve the time of the
-- call, whose counter is the period that holds it. A call on an earlier period's counter sorts before every call on
-- a later one (its key is before the later period's start, the later call's is at or after it), so any two
-- batches lock the counters of one metric in the same order. A fixed metric has one counter: its order is moot.
-- metering_batch_as_bearer is restated whole from 20261125000300 with only that change (marked).

create or replace function public.metering_batch_as_bearer(
  p_operations text[], p_user_ids text[], p_token_keys text[], p_issued_ats timestamptz[],
  p_client_ids text[], p_token_agent_ids uuid[], p_agent_ids uuid[], p_metric_slugs text[],
  p_client_req_ids text[], p_amounts bigint[], p_nows timestamptz[],
  -- defaults: an instance still running the previous code (a rolling deploy) calls without them and keeps working
  p_reservation_ids uuid[] default null, p_ttl_seconds integer[] default null
) returns table (
  call_index integer,
  caller_status text, caller_email text, caller_name text, caller_role text, caller_created_at timestamptz,
  outcome text, replayed boolean, kind text, used bigint, quota_limit bigint,
  period_start timestamptz, period_end timestamptz, requested bigint, reserved bigint, original jsonb,
  reservation_id uuid, status text, amount bigint, committed_amount bigint, expires_at timestamptz, created_at timestamptz,
  metric text
) language plpgsql volatile as $$
declare
  v_i integer;
begin
  -- the order of the counters the calls lock: agent, user, metric, then the counter's period, as a time inside it:
  -- a hold's own counter key for a commit, release or read, the call's time for the others (their counter is the
  -- period holding that time); a call on an earlier period's counter always sorts first (changed in 20261126001100)
  -- (scalar subqueries, each run only for a call that names a reservation: a join here was planned as a scan of
  -- every reservation per batch, which grew with the table)
  for v_i in
    select i from generate_subscripts(p_operations, 1) as i
     order by p_agent_ids[i], p_user_ids[i],
              coalesce(p_metric_slugs[i],
                       (select m.slug from public.usage_reservations r join public.metric_definitions m on m.id = r.metric_id
                         where r.id = p_reservation_ids[i])) nulls last,
              case when p_reservation_ids[i] is null then p_nows[i]
                   else (select r.counter_key from public.usage_reservations r where r.id = p_reservation_ids[i]) end,
              p_client_req_ids[i] nulls last, i
  loop
    if p_operations[v_i] in ('increment', 'decrement') then
      return query
        select v_i, m.caller_status, m.caller_email, m.caller_name, m.caller_role, m.caller_created_at,
               m.outcome, m.replayed, m.kind, m.used, m.quota_limit, m.period_start, m.period_end, m.requested, m.reserved,
               m.original, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz, null::timestamptz, null::text
          from public.metering_call_as_bearer(
                 p_operation => p_operations[v_i], p_user_id => p_user_ids[v_i],
                 p_token_keys => string_to_array(p_token_keys[v_i], ' '), p_issued_at => p_issued_ats[v_i],
                 p_client_id => p_client_ids[v_i], p_token_agent_id => p_token_agent_ids[v_i], p_agent_id => p_agent_ids[v_i],
                 p_metric_slug => p_metric_slugs[v_i], p_client_req_id => p_client_req_ids[v_i], p_amount => p_amounts[v_i],
                 p_now => p_nows[v_i]) m;
    else
      return query
        select v_i, m.caller_status, m.caller_email, m.caller_name, m.caller_role, m.caller_created_at,
               m.outcome, m.replayed, m.kind, m.used, m.quota_limit, m.period_start, m.period_end, m.requested, m.reserved,
               m.original, m.reservation_id, m.status, m.amount, m.committed_amount, m.expires_at, m.created_at, m.metric
          from public.metering_reservation_as_bearer(
                 p_operation => p_operations[v_i], p_user_id => p_user_ids[v_i],
                 p_token_keys => string_to_array(p_token_keys[v_i], ' '), p_issued_at => p_issued_ats[v_i],
                 p_client_id => p_client_ids[v_i], p_token_agent_id => p_token_agent_ids[v_i], p_agent_id => p_agent_ids[v_i],
                 p_metric_slug => p_metric_slugs[v_i], p_reservation_id => p_reservation_ids[v_i],
                 p_client_req_id => p_client_req_ids[v_i], p_amount => p_amounts[v_i], p_ttl_seconds => p_ttl_seconds[v_i],
                 p_now => p_nows[v_i]) m;
    end if;
  end loop;
end
$$;
