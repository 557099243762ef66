-- Grants that end in the auth library's tables end for JWT access tokens too, whatever path ended them.
--
-- The library keeps no row for a JWT access token, so on its own it cannot make one stop working before it
-- expires (10 h). Our Authenticator refuses any bearer token named in public.revoked_tokens; these triggers write
-- those rows when a grant ends, so that every bearer-protected route agrees with the library's own
-- introspection and userinfo.

-- A session ends (sign-out, RP-initiated logout, session revocation, password reset): the access tokens issued
-- under it (claim `sid`) stop working, as the library's introspection already considers them inactive.
-- Refresh tokens obtained with offline_access survive (the library detaches them from the session); the access
-- tokens they mint from then on carry no `sid`.
create function public.revoke_tokens_of_ended_session() returns trigger language plpgsql as $$
begin
  insert into public.revoked_tokens (key, expires_at)
  values ('grant:' || old.id, now() + interval '10 hours 5 minutes')
  on conflict (key) do nothing;
  return old;
end
$$;
create trigger session_end_revokes_tokens after delete on "session"
  for each row execute function public.revoke_tokens_of_ended_session();

-- A user withdraws consent from an agent (the library's /oauth2/delete-consent only deletes the consent row):
-- the agent loses access at once: its refresh tokens for the user are deleted and its live access tokens revoked.
create function public.revoke_tokens_of_withdrawn_consent() returns trigger language plpgsql as $$
begin
  if old."userId" is null then
    return old;
  end if;
  delete from "oauthAccessToken" where "clientId" = old."clientId" and "userId" = old."userId";
  delete from "oauthRefreshToken" where "clientId" = old."clientId" and "userId" = old."userId";
  insert into public.revoked_tokens (key, expires_at)
  select 'jti:' || jti, expires_at
    from public.oauth_issued_access_tokens
   where client_id = old."clientId" and user_id = old."userId" and expires_at > now()
  on conflict (key) do nothing;
  return old;
end
$$;
create trigger consent_withdrawal_revokes_tokens after delete on "oauthConsent"
  for each row execute function public.revoke_tokens_of_withdrawn_consent();
