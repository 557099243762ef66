-- Every organization keeps an owner, and an invitation stands only while its inviter does (found by a hostile review
-- of organizations, review 05).
--
-- 1. The organization plugin keeps an owner by counting the organization's owners and then deleting (leave,
--    remove-member) or rewriting (update-member-role of one's own role) a member, with nothing between the two: two
--    owners leaving at once, or removing each other at once, both counted two owners and both got 200, and the
--    organization was left with no owner for good (only an owner makes an owner or deletes the organization). One rule
--    here holds for every writer of "member": a delete of an owner's row, or a change of its role or organization that
--    takes the owner away, takes a lock of the organization's row (FOR NO KEY UPDATE: two such changes of one
--    organization wait for each other; adding members, which only takes the row's key share, does not wait) and then
--    counts the other owners in a statement of its own (READ COMMITTED: it sees what the change before it committed),
--    so of two such changes at once the second sees the first and is refused: SQLSTATE 23514 with the constraint name
--    `organization_keeps_an_owner`, which the library's error hook answers as the library answers a lone owner leaving
--    (400 YOU_CANNOT_LEAVE_THE_ORGANIZATION_AS_THE_ONLY_OWNER, or ..._WITHOUT_AN_OWNER for a role change;
--    functions/auth/organization-owners.ts). Roles may be comma lists ("owner,admin"): any element "owner" counts.
--    Two deletions are not refused: the organization's own (its members go by its foreign key's cascade, the
--    organization row already gone; the plugin deletes the members first, so its beforeDeleteOrganization hook deletes
--    the organization row before it, better-auth.ts), and the removal of the member's account (a platform admin's
--    remove-user: the user row already gone, its memberships go by their cascade). An account's removal is erasure and
--    is never held back by what it owns; an organization it owned alone keeps its other members and has no owner, as
--    before this rule. (An operator deleting an organization in SQL deletes its row, not its members first.)
-- 2. A member who leaves or is removed, or an account that is banned, kept acting through the invitations it had left
--    pending: the library's get-invitation called such an invitation dead (400
--    INVITER_IS_NO_LONGER_A_MEMBER_OF_THE_ORGANIZATION), but accept-invitation never looked at the inviter, so a
--    removed admin's second account joined as admin. The rule, once: an invitation stands while its inviter is a
--    member of its organization and not banned (public.invitation_inviter_stands, which the accept-invitation hook asks,
--    functions/auth/invitation-rules.ts). And so that no listing shows such an invitation as live, a member's pending
--    invitations to an organization are canceled when their membership ends, and an account's pending invitations when
--    it is banned (lifting the ban does not bring them back: the member may invite again). Invitations left pending by
--    inviters who are gone or banned before this migration are canceled here.

-- Whether a role (one name or a comma list) holds "owner".
create function public.organization_role_is_owner(p_role text) returns boolean
language sql immutable
set search_path = pg_catalog
as $$
  select coalesce('owner' = any (select btrim(r) from unnest(string_to_array(p_role, ',')) r), false)
$$;

create function public.organization_keeps_an_owner() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if not public.organization_role_is_owner(old.role)
     or (tg_op = 'UPDATE' and public.organization_role_is_owner(new.role) and new."organizationId" = old."organizationId") then
    -- was not an owner, or stays one of the same organization: nothing is taken away
    if tg_op = 'DELETE' then return old; end if;
    return new;
  end if;
  -- the member's account is being removed (its memberships go by the foreign key's cascade): not held back
  if tg_op = 'DELETE' and not exists (select 1 from "user" u where u.id = old."userId") then
    return old;
  end if;
  -- the organization is being deleted (its members go by the cascade): nothing to keep
  perform 1 from "organization" o where o.id = old."organizationId" for no key update;
  if not found then
    if tg_op = 'DELETE' then return old; end if;
    return new;
  end if;
  if not exists (select 1 from member m
                  where m."organizationId" = old."organizationId" and m.id <> old.id
                    and public.organization_role_is_owner(m.role)) then
    if tg_op = 'DELETE' then
      raise exception 'an organization keeps an owner: removing its only owner would leave none'
        using errcode = '23514', constraint = 'organization_keeps_an_owner';
    end if;
    raise exception 'an organization keeps an owner: changing the role of its only owner would leave none'
      using errcode = '23514', constraint = 'organization_keeps_an_owner', detail = 'role change';
  end if;
  if tg_op = 'DELETE' then return old; end if;
  return new;
end
$$;
revoke all on function public.organization_keeps_an_owner() from public, anon, authenticated;

create trigger member_keeps_an_owner before update of role, "organizationId" or delete on "member"
  for each row execute function public.organization_keeps_an_owner();

-- The invitation rule, once: an invitation stands while its inviter is a member of its organization and not banned.
create function public.invitation_inviter_stands(p_organization_id text, p_inviter_id text) returns boolean
language sql stable
set search_path = public, pg_temp
as $$
  select exists (select 1 from member m join "user" u on u.id = m."userId"
                  where m."organizationId" = p_organization_id and m."userId" = p_inviter_id
                    and not public.banned_at(u.banned, u."banExpires", now()))
$$;
revoke all on function public.invitation_inviter_stands(text, text) from public, anon, authenticated;

-- A membership that ends (leave, remove-member) cancels the member's pending invitations to that organization. Not
-- needed when the organization is deleted (its invitations go with it) nor when the account is removed (its
-- invitations go by invitation."inviterId"'s cascade).
create function public.member_departure_cancels_invitations() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if exists (select 1 from "user" u where u.id = old."userId")
     and exists (select 1 from "organization" o where o.id = old."organizationId") then
    update invitation set status = 'canceled'
     where "organizationId" = old."organizationId" and "inviterId" = old."userId" and status = 'pending';
  end if;
  return null;
end
$$;
revoke all on function public.member_departure_cancels_invitations() from public, anon, authenticated;

create trigger member_departure_cancels_invitations after delete on "member"
  for each row execute function public.member_departure_cancels_invitations();

-- A ban cancels the account's pending invitations, whoever writes the ban (our POST /admin/users/{id}/ban, the
-- library's ban-user or update-user).
create function public.ban_cancels_invitations() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  update invitation set status = 'canceled' where "inviterId" = new.id and status = 'pending';
  return null;
end
$$;
revoke all on function public.ban_cancels_invitations() from public, anon, authenticated;

create trigger user_ban_cancels_invitations after update of banned on "user"
  for each row when (coalesce(new.banned, false) and not coalesce(old.banned, false))
  execute function public.ban_cancels_invitations();

update invitation i set status = 'canceled'
 where i.status = 'pending' and not public.invitation_inviter_stands(i."organizationId", i."inviterId");
