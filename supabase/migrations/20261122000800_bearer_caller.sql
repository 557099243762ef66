-- The database half of bearer authentication, as functions, so that one rule serves every caller.
--
-- A JWT access token is verified in process (signature, issuer, audience, expiry); what only the database knows
-- is checked here: the user still exists, is not banned, and the token is not on the revocation list
-- (`user:<sub>`, `jti:<jti>`, `grant:<sid>`, each optionally limited to tokens issued before a time).
-- functions/auth/authenticator.ts calls public.bearer_caller for every bearer request; the metering hot path
-- calls public.metering_call_as_bearer, which runs the same check and the usage call in ONE statement, so an
-- agent backend's increment costs one round trip to the database instead of two.

-- The ban rule, once: banned, and either for good (no end) or until a time still ahead. Inlined by the planner.
create function public.banned_at(p_banned boolean, p_ban_expires timestamptz, p_at timestamptz) returns boolean
language sql immutable as $$
  select coalesce(p_banned, false) and (p_ban_expires is null or p_ban_expires > p_at)
$$;

create function public.bearer_caller(
  p_user_id text, p_token_keys text[], p_issued_at timestamptz, p_now timestamptz
) returns table (status text, id text, email text, name text, role text, created_at timestamptz)
language sql stable as $$
  select case
           when u.id is null then 'no_user'
           when exists (select 1 from public.revoked_tokens r
                         where r.key = any (p_token_keys)
                           and (r.issued_before is null or r.issued_before > p_issued_at)) then 'revoked'
           when public.banned_at(u.banned, u."banExpires", p_now) then 'banned'
           else 'ok'
         end,
         u.id, u.email, u.name, u.role, u."createdAt"
    from (select 1) one
    left join "user" u on u.id = p_user_id
$$;

-- Increment or decrement as the holder of a bearer token: the caller check first; only an 'ok' caller reaches
-- the usage call. caller_status other than 'ok' means nothing was counted (outcome is then null).
create function public.metering_call_as_bearer(
  p_operation text, p_user_id text, p_token_keys text[], p_issued_at timestamptz,
  p_agent_id uuid, p_metric_slug text, p_client_req_id text, p_amount bigint, p_now timestamptz
) returns table (
  caller_status text, caller_email text, caller_name text, caller_role text, caller_created_at timestamptz,
  outcome text, replayed boolean, kind text, used bigint, quota_limit bigint,
  period_start timestamptz, period_end timestamptz, requested bigint
) language plpgsql volatile as $$
declare
  v_caller record;
begin
  select * into v_caller from public.bearer_caller(p_user_id, p_token_keys, p_issued_at, p_now);
  if v_caller.status <> 'ok' then
    return query select v_caller.status, null::text, null::text, null::text, null::timestamptz,
                        null::text, null::boolean, null::text, null::bigint, null::bigint,
                        null::timestamptz, null::timestamptz, null::bigint;
    return;
  end if;
  if p_operation = 'increment' then
    return query select v_caller.status, v_caller.email, v_caller.name, v_caller.role, v_caller.created_at, m.*
                   from public.metering_increment(p_user_id, p_agent_id, p_metric_slug, p_client_req_id, p_amount, p_now) m;
  elsif p_operation = 'decrement' then
    return query select v_caller.status, v_caller.email, v_caller.name, v_caller.role, v_caller.created_at, m.*
                   from public.metering_decrement(p_user_id, p_agent_id, p_metric_slug, p_client_req_id, p_amount, p_now) m;
  else
    raise exception 'unknown metering operation %', p_operation using errcode = '22023';
  end if;
end
$$;

-- Server-side only: the service calls these with its own role; the Data API's roles have no business here.
revoke execute on function public.bearer_caller(text, text[], timestamptz, timestamptz) from public, anon, authenticated;
revoke execute on function public.metering_call_as_bearer(text, text, text[], timestamptz, uuid, text, text, bigint, timestamptz)
  from public, anon, authenticated;
