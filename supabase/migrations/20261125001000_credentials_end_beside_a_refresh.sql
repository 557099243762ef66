-- A grant that ends must end even while its agent is refreshing. A password change or a ban (20261123000401) ends
-- every credential of the user, a consent withdrawal (20261122000301) the user's grant to one client; each deletes
-- the refresh tokens concerned. The library refreshes in two statements, each its own transaction: first an UPDATE
-- that marks the presented refresh token rotated, then an INSERT of the new one. An end committed between the two
-- deleted the refresh tokens before the new one existed, so the new one survived it, and so could the access token
-- minted with it (stamped in the same second as a password change, recorded after it). An agent refreshing a stolen
-- token in a loop, or refreshing as fast as it can to outlive a withdrawn consent, lands in that window often.
--
-- The rules that close it:
--   1. Ending a grant deletes its refresh tokens through public.end_refresh_token_families, which remembers each
--      family it ends (the authorization code all of a family's refresh tokens descend from) as a
--      `family:<code id>` row in public.revoked_tokens, and first locks the user's row FOR UPDATE.
--   2. A refresh token written into an ended family is born revoked (presenting it later is a reuse, which ends what
--      is left). The trigger runs after the foreign-key checks (its name sorts after PostgreSQL's
--      "RI_ConstraintTrigger_..."; triggers of one event fire in name order), and the check on the user's row waits
--      for an end holding that row's lock, so the trigger sees an end the insert waited for. An end that took the
--      lock after the insert had checked the row waits for the insert to commit, and then deletes the new token.
--      No clocks are compared: a family is a code id, and a new grant is a new code.
--   3. A refresh token naming a session that is gone is written without it, as the session's foreign key
--      (on delete set null) would have left it had it existed a moment earlier: the write no longer fails when a
--      sign-out, a password change or the housekeeping deletes the session mid-refresh (it answered 500, and a retry of
--      the already rotated token then looked like a reuse). The session row is read FOR KEY SHARE before the
--      foreign-key checks: a delete in progress is waited for, so the session lock is taken first, as an end
--      takes it first too (it deletes the sessions before it locks the user), and the two never wait on each other.
-- The token endpoint records the access token minted beside the new refresh token in one transaction with a look at
-- that refresh token, and when it was born revoked or is gone, revokes the access token and answers invalid_grant
-- (functions/auth/oauth/protocol-gaps.ts).
create function public.end_refresh_token_families(p_user_id text, p_client_id text) returns void language plpgsql as $$
begin
  perform 1 from "user" where id = p_user_id for update;
  with gone as (
    delete from "oauthRefreshToken"
     where "userId" = p_user_id and (p_client_id is null or "clientId" = p_client_id)
    returning "authorizationCodeId"
  )
  insert into public.revoked_tokens (key, expires_at)
  select distinct 'family:' || "authorizationCodeId", now() + interval '10 hours 5 minutes'
    from gone where "authorizationCodeId" is not null
  on conflict (key) do update set expires_at = excluded.expires_at;
end
$$;

-- Sessions first (rule 3's lock order), then the families and their user's row, then the access tokens recorded so
-- far: a token endpoint recording one holds the user's row (its foreign key) until it has looked at its refresh token.
create or replace function public.revoke_user_credentials(p_user_id text) returns void language plpgsql as $$
begin
  delete from "session" where "userId" = p_user_id;
  perform public.end_refresh_token_families(p_user_id, null);
  insert into public.revoked_tokens (key, expires_at)
  select 'jti:' || t.jti, t.expires_at
    from public.oauth_issued_access_tokens t
   where t.user_id = p_user_id and t.expires_at > now()
  on conflict (key) do nothing;
  delete from "oauthAccessToken" where "userId" = p_user_id;
  insert into public.revoked_tokens (key, expires_at, issued_before)
  values ('user:' || p_user_id, now() + interval '10 hours 5 minutes', date_trunc('second', now()))
  on conflict (key) do update set issued_before = excluded.issued_before, expires_at = excluded.expires_at;
end
$$;

create or replace function public.revoke_tokens_of_withdrawn_consent() returns trigger language plpgsql as $$
begin
  if old."userId" is null then
    return old;
  end if;
  perform public.end_refresh_token_families(old."userId", old."clientId");
  delete from "oauthAccessToken" where "clientId" = old."clientId" and "userId" = old."userId";
  insert into public.revoked_tokens (key, expires_at)
  select 'jti:' || jti, expires_at
    from public.oauth_issued_access_tokens
   where client_id = old."clientId" and user_id = old."userId" and expires_at > now()
  on conflict (key) do nothing;
  return old;
end
$$;

create function public.revoke_refresh_token_of_ended_family() returns trigger language plpgsql as $$
begin
  if new.revoked is null and new."authorizationCodeId" is not null
     and exists (select 1 from public.revoked_tokens where key = 'family:' || new."authorizationCodeId") then
    update "oauthRefreshToken" set revoked = now() where id = new.id;
  end if;
  return null;
end
$$;
create trigger refresh_token_of_ended_family after insert on "oauthRefreshToken"
  for each row execute function public.revoke_refresh_token_of_ended_family();

create function public.detach_refresh_token_from_ended_session() returns trigger language plpgsql as $$
begin
  if new."sessionId" is not null then
    perform 1 from "session" where id = new."sessionId" for key share;
    if not found then
      new."sessionId" := null;
    end if;
  end if;
  return new;
end
$$;
create trigger refresh_token_session_still_there before insert on "oauthRefreshToken"
  for each row execute function public.detach_refresh_token_from_ended_session();

revoke execute on function public.end_refresh_token_families(text, text) from public, anon, authenticated;
revoke execute on function public.revoke_refresh_token_of_ended_family() from public, anon, authenticated;
revoke execute on function public.detach_refresh_token_from_ended_session() from public, anon, authenticated;
