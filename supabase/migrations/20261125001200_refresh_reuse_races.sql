-- A refresh token presented a second time ends its family, also when the two presentations race (rule 9 of
-- docs/security.md; the lock order and the remembered families of 20261125001000). The library's reuse detection
-- had two gaps an agent, or a thief holding a copy of its refresh token, could land in:
--   1. It ends a reused token's family (the client's refresh tokens for that user) with a plain DELETE that takes no
--      lock on the user's row and remembers nothing. A rotation of the same family already under way (its UPDATE
--      marking the token rotated done, its INSERT of the new token not yet) wrote its new refresh token after that
--      DELETE, and that token lived. The same for a replayed authorization code, whose tokens the library deletes.
--   2. Two presentations at once both read the token live; one rotates it, and the library refuses the other
--      (invalid_grant) without counting it as a reuse. The family of the winner (the thief, as often as not) lived on.
-- The token endpoint (functions/auth/oauth/protocol-gaps.ts) now ends the family again after the library has answered,
-- through this function and so in the order of every end: the user's row first, the family remembered, then what a
-- racing rotation wrote meanwhile deleted (one that writes later waits for the user's row and is born revoked).
--
-- end_refresh_token_families gains the family: a code id limits the end to the tokens descending from that code and
-- remembers the family even when the library already deleted every one of its tokens. Without it, as before: every
-- family of the user (at one client, or at all of them).
drop function public.end_refresh_token_families(text, text);
create function public.end_refresh_token_families(
  p_user_id text, p_client_id text, p_authorization_code_id text default null
) returns void language plpgsql as $$
begin
  perform 1 from "user" where id = p_user_id for update;
  if p_authorization_code_id is not null then
    insert into public.revoked_tokens (key, expires_at)
    values ('family:' || p_authorization_code_id, now() + interval '10 hours 5 minutes')
    on conflict (key) do update set expires_at = excluded.expires_at;
  end if;
  with gone as (
    delete from "oauthRefreshToken"
     where "userId" = p_user_id and (p_client_id is null or "clientId" = p_client_id)
       and (p_authorization_code_id is null or "authorizationCodeId" = p_authorization_code_id)
    returning "authorizationCodeId"
  )
  insert into public.revoked_tokens (key, expires_at)
  select distinct 'family:' || "authorizationCodeId", now() + interval '10 hours 5 minutes'
    from gone where "authorizationCodeId" is not null
  on conflict (key) do update set expires_at = excluded.expires_at;
end
$$;
revoke execute on function public.end_refresh_token_families(text, text, text) from public, anon, authenticated;
