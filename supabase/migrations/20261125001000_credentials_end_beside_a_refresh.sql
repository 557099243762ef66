-- A grant that ends must end even while its agent is refreshing. A password change or a ban (20261123000401) ends
-- every credential of the user, a consent withdrawal (20261122000301) the user's grant to one client; each deletes
-- the refresh tokens concerned. The library refreshes in two statements, each its own transaction: first an UPDATE
-- that marks the presented refresh token rotated, then an INSERT of the new one. An end committed between the two
-- deleted the refresh tokens before the new one existed, so the new one survived it, and so could the access token
-- minted with it (stamped in the same second as a password change, recorded after it). An agent refreshing a stolen
-- token in a loop, or refreshing as fast as it can to outlive a withdrawn consent, lands in that window often.
--
-- The rules that close it, with one lock order throughout (the user's row first, then the sessions), so that ends
-- and refreshes wait for each other but never deadlock:
--   1. Every end first locks the user's row FOR UPDATE, and deletes refresh tokens through
--      public.end_refresh_token_families, which remembers each family it ends (the authorization code all of a
--      family's refresh tokens descend from) as a `family:<code id>` row in public.revoked_tokens.
--   2. Writing a refresh token first reads its user's row FOR KEY SHARE (a BEFORE trigger, ahead of the foreign-key
--      checks, which would take the session's row first): a write that comes while an end holds the row waits for
--      it; an end that comes while a write holds it waits for that write to commit, and then deletes the new token.
--   3. A refresh token written into an ended family is born revoked (presenting it later is a reuse, which ends what
--      is left). No clocks are compared: a family is a code id, and a new grant is a new code.
--   4. A refresh token naming a session that is gone (a sign-out, an end, or the housekeeping deleted it while the
--      token was being made): a rotation (its family has other tokens) is written without the session, as the
--      session's foreign key (on delete set null) would have left it a moment earlier; that write used to fail, answer
--      500, and a retry of the already rotated token then looked like a reuse. The first token of a grant (a code
--      exchanged just as its session ended) is born revoked: the library requires that session, and the foreign
--      key used to refuse the write.
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

-- The user's row first (the lock order above), then the sessions and the families, then the access tokens recorded so
-- far: a token endpoint recording one holds the user's row (its foreign key) until it has looked at its refresh token.
create or replace function public.revoke_user_credentials(p_user_id text) returns void language plpgsql as $$
begin
  perform 1 from "user" where id = p_user_id for update;
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

create function public.refresh_token_write_waits_for_ends() returns trigger language plpgsql as $$
begin
  perform 1 from "user" where id = new."userId" for key share;
  if new."sessionId" is not null then
    perform 1 from "session" where id = new."sessionId" for key share;
    if not found then
      -- rule 4: a rotation outlives its session; the first token of a grant does not
      if not exists (select 1 from "oauthRefreshToken" r
                      where r."authorizationCodeId" = new."authorizationCodeId" and r."userId" = new."userId") then
        new.revoked := now();
      end if;
      new."sessionId" := null;
    end if;
  end if;
  return new;
end
$$;
create trigger refresh_token_write_waits_for_ends before insert on "oauthRefreshToken"
  for each row execute function public.refresh_token_write_waits_for_ends();

revoke execute on function public.end_refresh_token_families(text, text) from public, anon, authenticated;
revoke execute on function public.revoke_refresh_token_of_ended_family() from public, anon, authenticated;
revoke execute on function public.refresh_token_write_waits_for_ends() from public, anon, authenticated;
