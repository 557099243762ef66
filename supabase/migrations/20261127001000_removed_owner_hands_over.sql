-- An account a platform admin removes hands over the organizations it owned alone.
--
-- The removal of an account is never held back by what it owns (20261127000800), and an organization it owned alone
-- kept its other members with no owner for good: only an owner makes an owner or deletes the organization, so nobody
-- could invite, change roles, delete it or leave it in order (noticed in review 05's mend). Now the removal, before
-- the account's row goes, hands each such organization to its longest-standing admin, else its longest-standing member
-- (a role list such as "admin,member" counts as an admin), who becomes its owner; an organization with nobody else in
-- it goes with the account (its invitations with it, by their cascade). The organization's row is locked first, as
-- every change that takes an owner away locks it (organization_keeps_an_owner), so a member leaving at that moment is
-- judged after the hand-over.
create function public.organization_role_has(p_role text, p_name text) returns boolean
language sql immutable
set search_path = pg_catalog
as $$
  select coalesce(p_name = any (select btrim(r) from unnest(string_to_array(p_role, ',')) r), false)
$$;
-- One reading of a role list: the owner test of 20261127000800 is this one, for 'owner'.
create or replace function public.organization_role_is_owner(p_role text) returns boolean
language sql immutable
set search_path = pg_catalog
as $$
  select public.organization_role_has(p_role, 'owner')
$$;

create function public.removed_owner_hands_over() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_organization text;
  v_heir text;
begin
  for v_organization in
    select m."organizationId" from member m
     where m."userId" = old.id and public.organization_role_is_owner(m.role)
     order by m."organizationId"
  loop
    perform 1 from "organization" o where o.id = v_organization for no key update;
    continue when not found;
    continue when exists (select 1 from member m
                           where m."organizationId" = v_organization and m."userId" <> old.id
                             and public.organization_role_is_owner(m.role));
    select m.id into v_heir from member m
     where m."organizationId" = v_organization and m."userId" <> old.id
     order by public.organization_role_has(m.role, 'admin') desc, m."createdAt", m.id
     limit 1;
    if v_heir is null then
      delete from "organization" where id = v_organization;
    else
      update member set role = 'owner' where id = v_heir;
    end if;
  end loop;
  return old;
end
$$;
revoke all on function public.removed_owner_hands_over() from public, anon, authenticated;
revoke all on function public.organization_role_has(text, text) from public, anon, authenticated;

create trigger user_removal_hands_over_organizations before delete on "user"
  for each row execute function public.removed_owner_hands_over();
