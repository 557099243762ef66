-- A password change or a ban ends every credential of the user (20261123000401), and must do so even while an agent
-- is refreshing. It did not quite: the library refreshes in two statements, each its own transaction, first an UPDATE
-- that marks the presented refresh token rotated, then an INSERT of the new one. A change committed between the two
-- deleted the user's refresh tokens before the new one existed, so the new one survived it, and so did the access
-- token minted with it (stamped in the same second as the change, recorded after it). An attacker refreshing a stolen
-- token in a loop lands in that window often. Two rules close it:
--
--   1. public.revoke_user_credentials first locks the user's row FOR UPDATE. Writing a refresh token checks its user
--      (the foreign key takes FOR KEY SHARE on that row), so a new refresh token either committed before the change
--      took its lock (and the change, which waited for it, deletes it) or waits until the change has committed.
--   2. A refresh token written for a grant authenticated before the user's credentials ended ("authTime" earlier
--      than the instant of the change, kept on the `user:` revocation row for its 10 hours as revoked_at) is born
--      revoked: presenting it later is a reuse, which ends its family. The exact instant, not issued_before, which
--      is the start of the change's second (JWTs carry whole seconds): a thief's grant may well have been
--      authenticated in that second too. The check is an AFTER trigger whose name sorts after PostgreSQL's foreign-key
--      triggers ("RI_ConstraintTrigger_..."; triggers of one event fire in name order), so it runs after the wait
--      of rule 1 and sees the change the insert waited for. A grant authenticated after the change (the user signed
--      in again) is untouched.
--
-- The access token minted beside such a refresh token is revoked by the token endpoint, which then answers
-- invalid_grant instead of handing out tokens that no longer work (functions/auth/oauth/protocol-gaps.ts).
-- The instant a `user:` row was last written (the credentials ended); null on the other keys.
alter table public.revoked_tokens add column revoked_at timestamptz;

create or replace function public.revoke_user_credentials(p_user_id text) returns void language plpgsql as $$
begin
  perform 1 from "user" where id = p_user_id for update;
  delete from "session" where "userId" = p_user_id;
  insert into public.revoked_tokens (key, expires_at)
  select 'jti:' || t.jti, t.expires_at
    from public.oauth_issued_access_tokens t
   where t.user_id = p_user_id and t.expires_at > now()
  on conflict (key) do nothing;
  delete from "oauthAccessToken" where "userId" = p_user_id;
  delete from "oauthRefreshToken" where "userId" = p_user_id;
  insert into public.revoked_tokens (key, expires_at, issued_before, revoked_at)
  values ('user:' || p_user_id, now() + interval '10 hours 5 minutes', date_trunc('second', now()), now())
  on conflict (key) do update set issued_before = excluded.issued_before, expires_at = excluded.expires_at,
                                  revoked_at = excluded.revoked_at;
end
$$;

create function public.revoke_refresh_token_of_ended_credentials() returns trigger language plpgsql as $$
begin
  if new.revoked is null and exists (
       select 1 from public.revoked_tokens r
        where r.key = 'user:' || new."userId" and coalesce(new."authTime", '-infinity') < r.revoked_at) then
    update "oauthRefreshToken" set revoked = now() where id = new.id;
  end if;
  return null;
end
$$;
create trigger refresh_token_after_credentials_end after insert on "oauthRefreshToken"
  for each row execute function public.revoke_refresh_token_of_ended_credentials();

revoke execute on function public.revoke_refresh_token_of_ended_credentials() from public, anon, authenticated;
