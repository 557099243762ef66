-- The Data API's `authenticated` reads follow the same rules as a bearer route (review 22, finding 3).
--
-- The only JWTs with `role: authenticated` and a user's `sub` are our OAuth access tokens (contract.md: access tokens
-- carry `role: "authenticated"`), so the owner-read policies are there for exactly those tokens, which are mostly agent
-- backends'. They asked only `user_id = auth.jwt() ->> 'sub'`: agent A's token read through PostgREST the user's
-- subscriptions to agent B (Stripe ids included), B's usage counters, addons and installs, and the user's waitlist
-- entries of other agents (over HTTP it reads its own agent's only: "an access token acts only within the agent that
-- owns its client"); and it kept reading after the user was banned or the token, its grant or the user's tokens were
-- revoked ("a banned user's token is rejected by every bearer-protected endpoint"), since the revocation list and the
-- ban are read only by the service.
--
-- Now every owner-read policy asks public.data_api_token_may_read(row's user, row's agent), one definition:
--   * the row is the token's user's (`sub`): kept as a plain comparison the planner inlines, so the user_id indexes
--     still find the rows (a security-definer function per row of the whole table would not);
--   * public.data_api_token_reaches(row's agent), security definer because `authenticated` cannot read the
--     revocation list, the users or the client tables: the token is one a bearer route would take, judged by
--     public.bearer_caller itself (the user exists and is not banned; `jti:`, `grant:` and `user:` revocations; the
--     client belongs to the agent its `aud` names, or is first-party when `aud` is the API), and when its `aud` names
--     an agent, the row is that agent's. The marketplace's first-party client (aud = the API) reads all the user's
--     rows, as over HTTP.
-- The audience is read as functions/auth/authenticator.ts's tokenAgent reads it (the API's base URL is the issuer's,
-- `{base}/api/auth`, which PostgREST has verified with the signature), the revocation keys as revocationKeys
-- (functions/auth/oauth/token-records.ts) makes them. Usage counters and addons have no user or agent of their own:
-- they are read when their subscription is (the subscriptions the caller may read, found once per statement: an
-- initplan) so the counters' and addons' subscription_id indexes serve the read.
-- The catalog's anon/authenticated reads are unchanged.

create function public.data_api_token_reaches(p_agent uuid) returns boolean
language plpgsql stable security definer
set search_path = pg_catalog, public
as $$
declare
  v_claims constant jsonb := auth.jwt();
  v_base text;
  v_aud jsonb := v_claims -> 'aud';
  v_value jsonb;
  v_api boolean := false;
  v_agents uuid[] := '{}';
  v_agent uuid;
  v_client text;
  v_status text;
begin
  -- what the authenticator requires of a token before it asks the database (jose's required claims)
  if jsonb_typeof(v_claims -> 'sub') is distinct from 'string' or jsonb_typeof(v_claims -> 'iss') is distinct from 'string'
     or jsonb_typeof(v_claims -> 'iat') is distinct from 'number' or jsonb_typeof(v_claims -> 'exp') is distinct from 'number'
     or (v_claims ->> 'exp')::numeric <= extract(epoch from now())
     or right(v_claims ->> 'iss', 9) <> '/api/auth' then
    return false;
  end if;
  v_base := left(v_claims ->> 'iss', -9);
  -- tokenAgent: `{base}/agents/{uuid}` names the agent, `{base}` the API; other audiences (userinfo) ride along
  for v_value in select * from jsonb_array_elements(case jsonb_typeof(v_aud) when 'array' then v_aud else jsonb_build_array(v_aud) end) loop
    continue when jsonb_typeof(v_value) <> 'string';
    if v_value #>> '{}' = v_base then
      v_api := true;
    elsif starts_with(v_value #>> '{}', v_base || '/agents/')
          and substr(v_value #>> '{}', length(v_base) + 9) ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' then
      v_agent := substr(v_value #>> '{}', length(v_base) + 9)::uuid;
      if not v_agent = any (v_agents) then
        v_agents := v_agents || v_agent;
      end if;
    end if;
  end loop;
  if cardinality(v_agents) = 1 and not v_api then
    v_agent := v_agents[1];
    if v_agent is distinct from p_agent then
      return false; -- an agent's token acts only within its agent
    end if;
  elsif cardinality(v_agents) = 0 and v_api then
    v_agent := null; -- the first-party client's token: all of the user's rows
  else
    return false; -- not a token of this API
  end if;
  v_client := case when jsonb_typeof(v_claims -> 'client_id') = 'string' then v_claims ->> 'client_id'
                   when jsonb_typeof(v_claims -> 'azp') = 'string' then v_claims ->> 'azp' end;
  if v_client is null then
    return false;
  end if;
  select c.status into v_status
    from public.bearer_caller(
           v_claims ->> 'sub',
           array['user:' || (v_claims ->> 'sub')]
             || case when jsonb_typeof(v_claims -> 'jti') = 'string' then array['jti:' || (v_claims ->> 'jti')] else '{}'::text[] end
             || case when jsonb_typeof(v_claims -> 'sid') = 'string' then array['grant:' || (v_claims ->> 'sid')] else '{}'::text[] end,
           to_timestamp((v_claims ->> 'iat')::double precision), now(), v_client, v_agent) c;
  return v_status = 'ok';
end
$$;

-- Not security definer and without settings, so that the planner inlines it into each policy: the owner comparison
-- is then an index condition on the row's user, and the definer check runs only for the token user's own rows.
create function public.data_api_token_may_read(p_owner text, p_agent uuid) returns boolean
language sql stable
as $$
  select p_owner = (auth.jwt() ->> 'sub') and public.data_api_token_reaches(p_agent)
$$;

revoke all on function public.data_api_token_reaches(uuid) from public, anon;
revoke all on function public.data_api_token_may_read(text, uuid) from public, anon;
-- the policies run as the caller, and only `authenticated` has owner-read policies
grant execute on function public.data_api_token_reaches(uuid) to authenticated;
grant execute on function public.data_api_token_may_read(text, uuid) to authenticated;

alter policy subscriptions_owner_read on public.subscriptions
  using (public.data_api_token_may_read(user_id, agent_id));
alter policy agent_installs_owner_read on public.agent_installs
  using (public.data_api_token_may_read(user_id, agent_id));
alter policy waitlist_entries_owner_read on public.waitlist_entries
  using (public.data_api_token_may_read(user_id, agent_id));
-- A counter or an addon is read with its subscription: the subquery reads public.subscriptions as the caller, through
-- subscriptions_owner_read above (asking data_api_token_may_read again here ran the token's check twice per row).
alter policy usage_counters_owner_read on public.usage_counters
  using (subscription_id = any (array(select s.id from public.subscriptions s)));
alter policy usage_addons_owner_read on public.usage_addons
  using (subscription_id = any (array(select s.id from public.subscriptions s)));
