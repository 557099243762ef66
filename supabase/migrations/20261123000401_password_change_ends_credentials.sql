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

-- Ends every way the user is signed in: sessions (their `grant:<sid>` revocations follow from the session trigger),
-- OAuth access and refresh tokens, and live JWT access tokens through `user:<id>` on the revocation list: every
-- token issued before now. The library stamps `iat` with the real time in whole seconds, hence now() (not a
-- service clock), and a token issued in the same second as this counts as before it.
create function public.revoke_user_credentials(p_user_id text) returns void language plpgsql as $$
begin
  delete from "session" where "userId" = p_user_id;
  delete from "oauthAccessToken" where "userId" = p_user_id;
  delete from "oauthRefreshToken" where "userId" = p_user_id;
  insert into public.revoked_tokens (key, expires_at, issued_before)
  values ('user:' || p_user_id, now() + interval '10 hours 5 minutes', now())
  on conflict (key) do update set issued_before = excluded.issued_before, expires_at = excluded.expires_at;
end
$$;

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
