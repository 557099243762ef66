-- The marketplace always keeps one platform admin who can act (found by a hostile review of the admin room, review 02).
--
-- "Own demotion -> 403" (contract.md, Administration) and "an admin cannot ban themselves" were checked against the
-- role the request was authenticated with, and the UPDATE ran later without looking again: two admins who demoted
-- (PUT /admin/users/{id}/role) or banned (POST /admin/users/{id}/ban) each other at the same moment both got 200, and
-- no admin was left. The library's /api/auth/admin/set-role, update-user, ban-user and remove-user have the same
-- check-then-write shape. One rule, here, holds for every writer of the row, present or future: a change that takes
-- the last usable admin away is refused. A usable admin has the role exactly 'platform_admin' (as requireAdmin reads
-- it), is not banned, and has a password to sign in with (a credential account): the library's remove-user is not one
-- transaction, it deletes the target's sessions and accounts before the user row, so of two admins removing each
-- other the refused one had already deleted the survivor's password (found while testing this change). Writers that
-- could take an admin away take one advisory lock first and then count the others (a statement of its own, so it sees
-- what the writer before it committed): of two such changes at once, the second sees the first and is refused.
-- Refused with SQLSTATE 23514 and the constraint name `platform_keeps_an_admin`, which our routes and the library's error hook answer 422 INVALID_STATE (never a 500).
--
-- Two triggers, one check: on "user" (demotion, ban, removal) and on "account" (deleting an admin's credential
-- account). Changes that add an admin or touch a non-admin never take the lock (ADMIN_EMAIL's recovery at start-up
-- restores the role, lifts a ban and writes a password: it only adds one). An operator who really wants no admin left
-- must disable the triggers.

-- Whether, without p_user_id, a usable admin remains. Takes the one lock every taking-away write takes first, and reads
-- in a statement of its own (READ COMMITTED: it sees what the writer before it committed).
create function public.another_usable_admin(p_user_id text) returns boolean
language plpgsql
set search_path = public, pg_temp
as $$
begin
  perform pg_advisory_xact_lock(hashtextextended('platform_keeps_an_admin', 0));
  return exists (select 1 from "user" u
                  where u.id <> p_user_id and u.role = 'platform_admin' and not coalesce(u.banned, false)
                    and exists (select 1 from account a
                                 where a."userId" = u.id and a."providerId" = 'credential' and a.password is not null));
end
$$;
revoke all on function public.another_usable_admin(text) from public, anon, authenticated;

create function public.platform_keeps_an_admin() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if old.role is distinct from 'platform_admin' or coalesce(old.banned, false)
     or (tg_op = 'UPDATE' and new.role is not distinct from 'platform_admin' and not coalesce(new.banned, false)) then
    -- was not a usable admin, or stays one: nothing is taken away
    if tg_op = 'DELETE' then return old; end if;
    return new;
  end if;
  if not public.another_usable_admin(old.id) then
    raise exception 'the marketplace must keep one platform admin who is not banned: this would leave none'
      using errcode = '23514', constraint = 'platform_keeps_an_admin';
  end if;
  if tg_op = 'DELETE' then return old; end if;
  return new;
end
$$;
revoke all on function public.platform_keeps_an_admin() from public, anon, authenticated;

create function public.credential_keeps_an_admin() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if old."providerId" = 'credential' and old.password is not null
     and exists (select 1 from "user" u
                  where u.id = old."userId" and u.role = 'platform_admin' and not coalesce(u.banned, false))
     and not public.another_usable_admin(old."userId") then
    raise exception 'the marketplace must keep one platform admin who can sign in: this would leave none'
      using errcode = '23514', constraint = 'platform_keeps_an_admin';
  end if;
  return old;
end
$$;
revoke all on function public.credential_keeps_an_admin() from public, anon, authenticated;

-- Named to run before user_removal_leaves_the_catalog (triggers of one event run in name order), so a refused
-- removal does no work first.
create trigger user_keeps_a_platform_admin before update of role, banned or delete on "user"
  for each row execute function public.platform_keeps_an_admin();
create trigger account_keeps_a_platform_admin before delete on account
  for each row execute function public.credential_keeps_an_admin();
