-- No session is made for an account banned while it signs in (found by review 17).
--
-- The auth library's admin plugin reads the account's ban before it creates a session, then inserts the session. A
-- ban committing between the two (its trigger, user_banned_revoke_credentials, deletes the sessions it can see) left
-- the new session alive. The service's own routes refuse it (every request checks public.banned_at), but the
-- library's own endpoints under /api/auth (organizations, the OAuth consent) do not look at the ban again.
--
-- Now a session is inserted only after the account's row is read FOR SHARE: it waits for a ban in flight (an update of
-- the row) and sees it once committed; a ban that comes after waits for the sign-in, and its trigger then deletes the
-- new session with the others. A banned account (public.banned_at: a ban not yet expired) gets no session: the
-- insert fails with 40001, which the service answers 503 "send it again" (functions/app.ts), and the sign-in sent
-- again gets the library's own 403 for a banned account. The library lifts an expired ban before it makes the session.
create function public.session_refuses_banned_user() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_banned boolean;
begin
  select public.banned_at(u.banned, u."banExpires", now()) into v_banned
    from "user" u where u.id = new."userId"
     for share;
  if v_banned then
    raise exception 'the account was banned while it signed in' using errcode = '40001';
  end if;
  return new;
end
$$;
revoke all on function public.session_refuses_banned_user() from public, anon, authenticated;

create trigger session_refuses_banned_user before insert on "session"
  for each row execute function public.session_refuses_banned_user();
