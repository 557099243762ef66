-- Reservations join the group commit (issue 16: "increments, decrements, and the reservations"): reserve, commit,
-- release and read go out in the same batches as increments and decrements, one statement and one commit for all.
--
-- Per-call semantics stay exactly those of the per-call functions: an increment or decrement runs
-- public.metering_call_as_bearer, a reservation call public.metering_reservation_as_bearer (20261123000500), each
-- with its caller check. The result has the columns of both (a call fills those of its kind, the others are null).
--
-- Deadlocks: every call that writes locks its counter first (a commit or release: the counter, then the hold; see
-- metering_settle_reservation), so the batch's global order is the counter's: (agent, user, metric, clientReqId).
-- A commit, release or read names a reservation, not a metric: it is ordered by its reservation's metric, looked up
-- here, so it takes its counter's lock in the same order as every other call on that counter.
drop function public.metering_batch_as_bearer(
  text[], text[], text[], timestamptz[], text[], uuid[], uuid[], text[], text[], bigint[], timestamptz[]);

create function public.metering_batch_as_bearer(
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
  for v_i in
    select i from generate_subscripts(p_operations, 1) as i
     order by p_agent_ids[i], p_user_ids[i],
              coalesce(p_metric_slugs[i],
                       (select m.slug from public.usage_reservations r join public.metric_definitions m on m.id = r.metric_id
                         where r.id = p_reservation_ids[i])) nulls last,
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

revoke execute on function public.metering_batch_as_bearer(
  text[], text[], text[], timestamptz[], text[], uuid[], uuid[], text[], text[], bigint[], timestamptz[], uuid[], integer[]
) from public, anon, authenticated;
