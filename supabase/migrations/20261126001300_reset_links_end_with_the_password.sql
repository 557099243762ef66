-- A password-reset link ends with every other credential of the user (found by a review).
--
-- public.revoke_user_credentials, which runs whenever a password is written (reset, change, an admin setting it) and
-- on a ban, ended sessions, refresh tokens and access tokens, but not the pending reset links (the library deletes
-- only the one that was used). So a link someone had taken from the mailbox still set a new password after the
-- owner changed it, or after the owner reset it with a newer link: a way back into the account for up to an hour.
-- Restated whole from 20261125001000 with only the marked line added.
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
  -- the user's pending password-reset links (added in 20261126001300)
  delete from "verification" where identifier like 'reset-password:%' and value = p_user_id;
end
$$;
