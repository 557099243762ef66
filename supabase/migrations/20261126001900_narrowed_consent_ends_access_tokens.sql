-- A consent the user narrows ends the agent's access tokens at once, as a withdrawal does.
--
-- The user narrows a consent with the library's /oauth2/update-consent, or by consenting again to a different set
-- when the agent asks for scopes it had not been given (the library then writes the new set over the old one). The
-- token endpoint already refuses a code or a refresh token the narrowed consent no longer covers (grantStands in
-- functions/auth/oauth/token-records.ts), but the access tokens issued before kept every scope they carried until
-- they expired, up to 10 hours: an agent kept reading the email the user had just taken back. The library keeps no
-- row per JWT access token and ours (public.oauth_issued_access_tokens) holds no scopes, so every live access token
-- of that client for that user is revoked; the agent refreshes (a refresh token the consent still covers gives a new
-- one) or asks the user again. A change that takes nothing away (the same scopes, or more) ends nothing.
--
-- In the order of every other end (migration 20261125001000): the user's row is locked before the revocations. The
-- token endpoint records a new access token (its foreign key holds that row) before it checks the consent, so a token
-- minted at the same moment is either recorded before this revocation, which then revokes it, or checked against the
-- narrowed consent and refused.

-- A consent's scopes as a JSON array: the library's adapter stores them as a JSON string inside the jsonb.
create function public.oauth_consent_scopes(p_scopes jsonb) returns jsonb
language sql immutable
as $$
  select case when jsonb_typeof(p_scopes) = 'string' then (p_scopes #>> '{}')::jsonb else p_scopes end
$$;

create function public.revoke_tokens_of_narrowed_consent() returns trigger language plpgsql as $$
begin
  perform 1 from "user" where id = new."userId" for update;
  insert into public.revoked_tokens (key, expires_at)
  select 'jti:' || jti, expires_at
    from public.oauth_issued_access_tokens
   where client_id = new."clientId" and user_id = new."userId" and expires_at > now()
  on conflict (key) do nothing;
  return null;
end
$$;

create trigger consent_narrowing_revokes_access_tokens after update of scopes on "oauthConsent"
  for each row
  when (new."userId" is not null
        and not (public.oauth_consent_scopes(new.scopes) @> public.oauth_consent_scopes(old.scopes)))
  execute function public.revoke_tokens_of_narrowed_consent();
