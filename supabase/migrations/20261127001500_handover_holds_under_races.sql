-- The hand-over of a removed owner's organization holds when other members leave or are removed at the same moment,
-- and never goes to a banned member while a standing one is there (review 10, findings 1 and 2).
--
-- 20261127001000 handed the organization over in a trigger before the account's row was deleted: it read the heir
-- with a plain select and then set the heir's role, with nothing holding the heir's row in between. A non-owner's
-- departure takes no organization lock, so
--   * the heir leaving at that moment made the update match no row: the removal answered 200 and the other members
--     were left with no owner for good;
--   * the heir's own account removed at that moment (another admin's remove-user) had its before-delete trigger read
--     the heir as an admin (the hand-over not yet committed), then its cascade deleted the row the hand-over had just
--     made the owner, which the owner rule lets go for a removed account: no owner again;
--   * a banned admin was chosen over a standing member: an owner who cannot sign in (the invitation rule of the same
--     night already says a banned member no longer stands), and a co-owner who was banned stopped the hand-over.
--
-- Now the hand-over happens where an owner's membership ends with its account, in the owner rule itself
-- (organization_keeps_an_owner): when the deleted row is an owner's and its account is gone, the organization's row
-- is locked (as every change that takes an owner away locks it) and, unless a standing owner remains, the heir is
-- taken FOR UPDATE of its member row: standing members first, then admins, then the longest-standing, then the id. A
-- heir whose row goes while we wait is skipped and the next one taken; a heir whose account is removed after it was
-- made the owner hands over in turn, by the same rule, when its own row goes. Only banned members left: the
-- longest-standing of them (an owner already among them keeps it), since a ban may be lifted and an organization
-- keeps an owner. Nobody left: the organization goes after the row (an AFTER trigger: a BEFORE trigger may not delete
-- what cascades onto the row being deleted), its invitations with it.
drop trigger user_removal_hands_over_organizations on "user";
drop function public.removed_owner_hands_over();

-- Makes the best remaining member of an organization its owner, unless a standing owner remains. The caller holds the
-- organization's row.
create function public.organization_hand_over(p_organization_id text, p_leaving_member_id text) returns void
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_heir_id text;
  v_heir_is_owner boolean;
begin
  if exists (select 1 from member m join "user" u on u.id = m."userId"
              where m."organizationId" = p_organization_id and m.id <> p_leaving_member_id
                and public.organization_role_has(m.role, 'owner')
                and not public.banned_at(u.banned, u."banExpires", now())) then
    return;
  end if;
  loop
    select m.id, public.organization_role_has(m.role, 'owner') into v_heir_id, v_heir_is_owner
      from member m join "user" u on u.id = m."userId"
     where m."organizationId" = p_organization_id and m.id <> p_leaving_member_id
     order by public.banned_at(u.banned, u."banExpires", now()),
              public.organization_role_has(m.role, 'owner') desc,
              public.organization_role_has(m.role, 'admin') desc,
              m."createdAt", m.id
     limit 1
       for update of m;
    if found then
      if not v_heir_is_owner then
        update member set role = 'owner' where id = v_heir_id;
      end if;
      return;
    end if;
    -- the heir's row went while we waited for it: take the next one, if anyone is left
    exit when not exists (select 1 from member m join "user" u on u.id = m."userId"
                           where m."organizationId" = p_organization_id and m.id <> p_leaving_member_id);
  end loop;
end
$$;
revoke all on function public.organization_hand_over(text, text) from public, anon, authenticated;

-- As in 20261127000800 but for the marked branch: an owner's row going with its account hands the organization over.
create or replace function public.organization_keeps_an_owner() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if not public.organization_role_has(old.role, 'owner')
     or (tg_op = 'UPDATE' and public.organization_role_has(new.role, 'owner') and new."organizationId" = old."organizationId") then
    -- was not an owner, or stays one of the same organization: nothing is taken away
    if tg_op = 'DELETE' then return old; end if;
    return new;
  end if;
  -- the organization is being deleted (its members go by the cascade): nothing to keep
  perform 1 from "organization" o where o.id = old."organizationId" for no key update;
  if not found then
    if tg_op = 'DELETE' then return old; end if;
    return new;
  end if;
  -- the member's account is being removed (its memberships go by the foreign key's cascade): never held back; the
  -- organization is handed over (20261127001500)
  if tg_op = 'DELETE' and not exists (select 1 from "user" u where u.id = old."userId") then
    perform public.organization_hand_over(old."organizationId", old.id);
    return old;
  end if;
  if not exists (select 1 from member m
                  where m."organizationId" = old."organizationId" and m.id <> old.id
                    and public.organization_role_has(m.role, 'owner')) then
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

-- An organization whose last member went with a removed account goes too.
create function public.removed_account_leaves_no_empty_organization() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if not exists (select 1 from "user" u where u.id = old."userId")
     and not exists (select 1 from member m where m."organizationId" = old."organizationId") then
    delete from "organization" where id = old."organizationId";
  end if;
  return null;
end
$$;
revoke all on function public.removed_account_leaves_no_empty_organization() from public, anon, authenticated;

create trigger member_removed_account_leaves_no_empty_organization after delete on "member"
  for each row execute function public.removed_account_leaves_no_empty_organization();
