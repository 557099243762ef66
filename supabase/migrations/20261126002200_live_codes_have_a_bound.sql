-- A client holds at most 10 live authorization codes for one user: the oldest goes when an 11th is issued.
--
-- Before, a client got at most 60 codes an hour for one user, whatever endpoint issued them, and the 61st authorization
-- was refused (temporarily_unavailable). That bounded the stored codes (each a "verification" row holding the whole
-- request, up to 4 KiB, for 10 minutes) and the refresh tokens an agent seller minted by authorizing its own account
-- again instead of refreshing. But a refusal can be caused by somebody else: a page on any site that opens a popup on
-- the user's click and navigates it through authorize 60 times (a top-level navigation, which is what a real
-- authorization is) used up the user's codes for that agent and locked them out of it for an hour (found by a review).
--
-- Now nothing is refused when a code is issued. The stored codes are bounded here instead, in the one place every code
-- passes whichever endpoint or library hook issued it: the insert of its verification row. Before it, the codes of the
-- same client and user that expired, and all but the 9 newest live ones, are deleted, under a lock per client and
-- user so that concurrent issues cannot both keep 10. An evicted code is refused at the token endpoint as any unknown
-- code is (invalid_grant); a real user has one authorization under way per agent, or a few across devices, each
-- exchanged within seconds. The refresh tokens are bounded by the count of exchanges at the token endpoint (60 an hour
-- per client and user, functions/auth/oauth/protocol-gaps.ts), which only the client itself can spend: an exchange
-- needs the code, which goes to the client's registered redirect_uri, its PKCE verifier and its credentials.
--
-- Which codes are the newest: the library stamps a code's row with whole seconds ("createdAt" = its iat), so codes
-- issued within one second would tie; the trigger stamps the row with the database's clock to the microsecond instead
-- (the library never reads a code row's "createdAt"). Expired means "expiresAt" (the library's) before the database's
-- now: both clocks are the hosts' real time.
--
-- The library writes a code's row as JSON.stringify({ type: 'authorization_code', query, userId, ... }) (its
-- redirectWithAuthorizationCode), so the prefix tells a code's row from other verification rows (reset links, email
-- changes) without parsing them. Its client and user are read from the JSON; anything unreadable is no grant (null),
-- never an error that would fail the library's insert.
create function public.authorization_code_grant(p_value text) returns text
language plpgsql immutable
as $$
declare
  v jsonb;
begin
  v := p_value::jsonb;
  return (v -> 'query' ->> 'client_id') || '|' || (v ->> 'userId');
exception when others then
  return null;
end
$$;

-- The codes of one client and user, found without reading other rows.
create index verification_authorization_code_grant_idx on "verification" (public.authorization_code_grant(value), "createdAt")
  where value like '{"type":"authorization_code",%';

create function public.keep_few_live_authorization_codes() returns trigger language plpgsql as $$
declare
  c_live_codes constant integer := 10;
  v_grant text := public.authorization_code_grant(new.value);
begin
  if v_grant is null then
    return new;
  end if;
  perform pg_advisory_xact_lock(hashtextextended('authorization_codes:' || v_grant, 0));
  new."createdAt" := clock_timestamp();
  delete from "verification" v
   where v.value like '{"type":"authorization_code",%'
     and public.authorization_code_grant(v.value) = v_grant
     and v.id not in (
       select w.id from "verification" w
        where w.value like '{"type":"authorization_code",%'
          and public.authorization_code_grant(w.value) = v_grant
          and w."expiresAt" > new."createdAt"
        order by w."createdAt" desc, w.id desc
        limit c_live_codes - 1);
  return new;
end
$$;

create trigger authorization_codes_bounded before insert on "verification"
  for each row
  when (new.value like '{"type":"authorization_code",%')
  execute function public.keep_few_live_authorization_codes();
