-- A password reset or change ends every session, refresh token and access token of the user (contract.md,
-- Trust boundaries; issue 10 finding 9).
--
-- The auth library deletes sessions on a reset (revokeSessionsOnPasswordReset) but leaves OAuth refresh tokens
-- (30 days) and JWT access tokens (10 h) alive, and a change-password without revokeOtherSessions keeps every
-- session. A ban already ends all of it (20261122000200_auth.sql); that body becomes one function,
-- public.revoke_user_credentials, which the ban trigger and a new trigger on the credential password both call.
-- A trigger rather than library hooks, as for bans: every path that writes a password (reset, change-password,
-- the admin plugin's set-user-password, ADMIN_PASSWORD at start, a claim of an anonymous purchase) gets the same
-- effect, in the same transaction as the new password.

-- Ends every way the user is signed in, and every access token minted before this instant:
--  * sessions (the session trigger writes `grant:<sid>`: every token bound to one of them, whenever minted);
--  * every recorded access token still live (`jti:<jti>`; the token endpoint records each token it hands out);
--  * OAuth access and refresh tokens of the library;
--  * `user:<id>` with issued_before = the start of the current second: every token of an earlier second. The
--    library stamps `iat` in whole seconds with the real time (hence now(), not a service clock), so an exact
--    instant would also kill the tokens minted in the rest of this second AFTER the change (a user who resets and
--    at once signs in to an agent would hold a token refused for its whole 10 h). Tokens of this second are covered
--    by the two rules above instead: by their session or by their record.
create function public.revoke_user_credentials(p_user_id text) returns void language plpgsql as $$
begin
  delete from "session" where "userId" = p_user_id;
  insert into public.revoked_tokens (key, expires_at)
  select 'jti:' || t.jti, t.expires_at
    from public.oauth_issued_access_tokens t
   where t.user_id = p_user_id and t.expires_at > now()
  on conflict (key) do nothing;
  delete from "oauthAccessToken" where "userId" = p_user_id;
  delete from "oauthRefreshToken" where "userId" = p_user_id;
  insert into public.revoked_tokens (key, expires_at, issued_before)
  values ('user:' || p_user_id, now() + interval '10 hours 5 minutes', date_trunc('second', now()))
  on conflict (key) do update set issued_before = excluded.issued_before, expires_at = excluded.expires_at;
end
$$;

-- The user's recorded tokens, read by the function above on every ban and password change.
create index oauth_issued_access_tokens_user_idx on public.oauth_issued_access_tokens (user_id, expires_at);

create or replace function public.revoke_credentials_of_banned_user() returns trigger language plpgsql as $$
begin
  perform public.revoke_user_credentials(new.id);
  return new;
end
$$;

create function public.revoke_credentials_on_password_change() returns trigger language plpgsql as $$
begin
  perform public.revoke_user_credentials(new."userId");
  return new;
end
$$;
create trigger account_password_change_revokes_credentials after update of password on "account"
  for each row when (new."providerId" = 'credential' and old.password is distinct from new.password)
  execute function public.revoke_credentials_on_password_change();

revoke execute on function public.revoke_user_credentials(text) from public, anon, authenticated;
