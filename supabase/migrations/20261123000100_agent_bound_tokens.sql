-- Contract revision 2, "Trust boundaries": every access token acts only within the agent that owns its client.
--
-- A token names its agent twice: `aud` holds the agent's resource URL ({base_url}/agents/{agentId}, RFC 8707; the
-- library refuses to mint it for any client not linked to that resource), and `client_id` is a client that
-- public.agent_oauth_clients maps to that agent. The authenticator reads the agent from `aud` in process; this
-- migration makes the database confirm the client -> agent mapping in the same statement that checks the user and
-- the revocation list, so a token whose client does not (or no longer) belong to its `aud` agent is refused.
--
-- The one client that belongs to no agent is the marketplace's own first-party client (admin automation): the only
-- client that may be granted the `admin` scope, and only for a platform_admin user. Its tokens carry
-- `aud` = {base_url}.

create table public.first_party_clients (
  client_id text primary key references "oauthClient" ("clientId") on delete cascade,
  created_at timestamptz(3) not null default now()
);
alter table public.first_party_clients enable row level security;
revoke all on public.first_party_clients from anon, authenticated;

drop function public.metering_call_as_bearer(text, text, text[], timestamptz, uuid, text, text, bigint, timestamptz);
drop function public.bearer_caller(text, text[], timestamptz, timestamptz);

-- status: 'ok' | 'no_user' | 'revoked' | 'banned' | 'wrong_client'. The client check runs only when p_client_id
-- is given (introspection and userinfo ask only about revocation and the user): then p_agent_id, the agent the
-- token's `aud` names, must own the client, or, when the token names no agent, the client must be first-party.
create function public.bearer_caller(
  p_user_id text, p_token_keys text[], p_issued_at timestamptz, p_now timestamptz,
  p_client_id text default null, p_agent_id uuid default null
) returns table (status text, id text, email text, name text, role text, created_at timestamptz)
language sql stable as $$
  select case
           when u.id is null then 'no_user'
           when exists (select 1 from public.revoked_tokens r
                         where r.key = any (p_token_keys)
                           and (r.issued_before is null or r.issued_before > p_issued_at)) then 'revoked'
           when public.banned_at(u.banned, u."banExpires", p_now) then 'banned'
           when p_client_id is not null and not (
                  case when p_agent_id is null
                       then exists (select 1 from public.first_party_clients f where f.client_id = p_client_id)
                       else exists (select 1 from public.agent_oauth_clients a
                                     where a.agent_id = p_agent_id and a.client_id = p_client_id)
                  end) then 'wrong_client'
           else 'ok'
         end,
         u.id, u.email, u.name, u.role, u."createdAt"
    from (select 1) one
    left join "user" u on u.id = p_user_id
$$;

-- Increment or decrement as the holder of a bearer token, in one statement: the caller check first, then the
-- trust boundary of usage writes (only the path agent's own client: a token of another agent, or the first-party
-- client, is 'other_agent' -> 403), and only then the usage call. caller_status other than 'ok' means nothing was
-- counted (outcome is then null).
create function public.metering_call_as_bearer(
  p_operation text, p_user_id text, p_token_keys text[], p_issued_at timestamptz,
  p_client_id text, p_token_agent_id uuid,
  p_agent_id uuid, p_metric_slug text, p_client_req_id text, p_amount bigint, p_now timestamptz
) returns table (
  caller_status text, caller_email text, caller_name text, caller_role text, caller_created_at timestamptz,
  outcome text, replayed boolean, kind text, used bigint, quota_limit bigint,
  period_start timestamptz, period_end timestamptz, requested bigint
) language plpgsql volatile as $$
declare
  v_caller record;
  v_status text;
begin
  select * into v_caller from public.bearer_caller(p_user_id, p_token_keys, p_issued_at, p_now, p_client_id, p_token_agent_id);
  v_status := v_caller.status;
  if v_status = 'ok' and p_token_agent_id is distinct from p_agent_id then
    v_status := 'other_agent';
  end if;
  if v_status <> 'ok' then
    return query select v_status, v_caller.email, v_caller.name, v_caller.role, v_caller.created_at,
                        null::text, null::boolean, null::text, null::bigint, null::bigint,
                        null::timestamptz, null::timestamptz, null::bigint;
    return;
  end if;
  if p_operation = 'increment' then
    return query select v_status, v_caller.email, v_caller.name, v_caller.role, v_caller.created_at, m.*
                   from public.metering_increment(p_user_id, p_agent_id, p_metric_slug, p_client_req_id, p_amount, p_now) m;
  elsif p_operation = 'decrement' then
    return query select v_status, v_caller.email, v_caller.name, v_caller.role, v_caller.created_at, m.*
                   from public.metering_decrement(p_user_id, p_agent_id, p_metric_slug, p_client_req_id, p_amount, p_now) m;
  else
    raise exception 'unknown metering operation %', p_operation using errcode = '22023';
  end if;
end
$$;

-- The resource of an agent's client, so the library mints tokens with `aud` = the agent's URL for that client and
-- refuses every other client (enforcePerClientResources). Idempotent; called by the token endpoint wrapper before
-- each exchange (the identifier depends on the service's public URL, which only the service knows). Returns the
-- agent of the client, or nothing for a client that belongs to no agent.
create function public.ensure_agent_resource(p_client_id text, p_base_url text, p_now timestamptz)
returns uuid language plpgsql volatile as $$
declare
  v_agent_id uuid;
  v_identifier text;
begin
  select a.agent_id into v_agent_id from public.agent_oauth_clients a where a.client_id = p_client_id;
  if v_agent_id is null then
    return null;
  end if;
  v_identifier := p_base_url || '/agents/' || v_agent_id::text;
  insert into "oauthResource" (id, identifier, name, "accessTokenTtl", disabled, "createdAt", "updatedAt")
  values (gen_random_uuid()::text, v_identifier, 'Agent ' || v_agent_id::text, 36000, false, p_now, p_now)
  on conflict (identifier) do nothing;
  insert into "oauthClientResource" (id, "clientId", "resourceId", "createdAt")
  values (gen_random_uuid()::text, p_client_id, v_identifier, p_now)
  on conflict ("clientId", "resourceId") do nothing;
  return v_agent_id;
end
$$;

revoke execute on function public.bearer_caller(text, text[], timestamptz, timestamptz, text, uuid) from public, anon, authenticated;
revoke execute on function public.metering_call_as_bearer(text, text, text[], timestamptz, text, uuid, uuid, text, text, bigint, timestamptz)
  from public, anon, authenticated;
revoke execute on function public.ensure_agent_resource(text, text, timestamptz) from public, anon, authenticated;
