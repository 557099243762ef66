-- An account's removal takes its organizations' rows before any of its memberships (found by review 13).
--
-- Since 20261127001500 an owner's membership going with its account takes its organization's row in the owner rule,
-- a BEFORE DELETE trigger of "member": the foreign key's cascade has locked the member row by then, so the removal
-- took a member, then its organization. An organization's own deletion takes the organization, then its members (the
-- cascade), and so does the hand-over (the organization, then the heir's row): a co-owner deleting the organization
-- while the other owner's account was removed, or two owners removed at once each the heir of the other's
-- organization, deadlocked, and PostgreSQL ended one of them (503, to be sent again). Now the removal takes every
-- organization the account is a member of, in id order, before the row goes (FOR NO KEY UPDATE, as the owner rule
-- takes it), so it waits for a deletion or another removal before holding any member row; the owner rule then finds
-- the organization's row already its own.
create function public.removal_locks_organizations() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  perform 1 from "organization" o
   where o.id in (select m."organizationId" from member m where m."userId" = old.id)
   order by o.id
     for no key update of o;
  return old;
end
$$;
revoke all on function public.removal_locks_organizations() from public, anon, authenticated;

create trigger user_removal_locks_organizations before delete on "user"
  for each row execute function public.removal_locks_organizations();
