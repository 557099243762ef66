-- Group commit of usage writes (issue 16). Concurrent increments and decrements arriving at the service while a
-- batch is in flight go to the database together, as ONE call of this function: one statement, one transaction,
-- one commit (one WAL flush) and one round trip for all of them, instead of one each.
--
-- Per-call semantics are exactly those of public.metering_call_as_bearer, which this calls for each element: the
-- caller check (user, revocation, ban, client -> agent, path agent), idempotency and replay of stored results (429s
-- included), exact admission under the counter row lock, ledger rows. Two calls of one batch with the same
-- clientReqId behave as two sequential calls: the second is the replay of the first.
--
-- Deadlocks: every batch takes its row locks in one global order, the calls sorted by (agent, user, metric,
-- clientReqId), so two concurrent batches can wait for each other but never in a cycle.
--
-- p_token_keys[i] is the call's revocation-list keys joined by spaces (keys hold no spaces), since SQL arrays of
-- arrays must be rectangular.
create function public.metering_batch_as_bearer(
  p_operations text[], p_user_ids text[], p_token_keys text[], p_issued_ats timestamptz[],
  p_client_ids text[], p_token_agent_ids uuid[], p_agent_ids uuid[], p_metric_slugs text[],
  p_client_req_ids text[], p_amounts bigint[], p_nows timestamptz[]
) returns table (
  call_index integer,
  caller_status text, caller_email text, caller_name text, caller_role text, caller_created_at timestamptz,
  outcome text, replayed boolean, kind text, used bigint, quota_limit bigint,
  period_start timestamptz, period_end timestamptz, requested bigint, reserved bigint, original jsonb
) language plpgsql volatile as $$
declare
  v_i integer;
begin
  for v_i in
    select i from generate_subscripts(p_operations, 1) as i
     order by p_agent_ids[i], p_user_ids[i], p_metric_slugs[i], p_client_req_ids[i] nulls last, i
  loop
    return query
      select v_i, m.*
        from public.metering_call_as_bearer(
               p_operations[v_i], p_user_ids[v_i], string_to_array(p_token_keys[v_i], ' '), p_issued_ats[v_i],
               p_client_ids[v_i], p_token_agent_ids[v_i], p_agent_ids[v_i], p_metric_slugs[v_i],
               p_client_req_ids[v_i], p_amounts[v_i], p_nows[v_i]) m;
  end loop;
end
$$;

revoke execute on function public.metering_batch_as_bearer(
  text[], text[], text[], timestamptz[], text[], uuid[], uuid[], text[], text[], bigint[], timestamptz[]
) from public, anon, authenticated;
