-- An organization has at most 100 pending invitations, whoever sends them at once.
--
-- The organization plugin's invite-member counts the organization's pending (unexpired) invitations, then inserts the
-- new one, with nothing holding the count: invitations sent at once into an organization of 98 pending all passed it,
-- and it held 103. list-invitations answers at most 100 rows, pending first (functions/auth/invitation-order.ts), so
-- the pending ones past 100 were live (their links could be accepted) and in no listing the owner could cancel them
-- from. The rule, as organization_membership_limit (migration 20261127006500) holds the members: an insert of a pending
-- invitation takes a lock of the organization's row (FOR NO KEY UPDATE: two invitations of one organization wait for
-- each other) and then counts its pending, unexpired invitations in a statement of its own (READ COMMITTED: it sees the
-- one committed before it), and refuses the 101st: SQLSTATE 23514, constraint `organization_invitation_limit`, which
-- the library's error hook answers as the plugin answers it (403 INVITATION_LIMIT_REACHED). The trigger's name sorts
-- after invitation_replaces_pending, so a re-invite has cancelled the address's pending invitation before the count
-- (a re-invite into a full organization replaces, as one at a time). 100 is the plugin's invitationLimit (its default,
-- not configured); tests/identity/organization-invitation-limit.pg-only.test.ts holds the two to each other.

create function public.organization_invitation_limit() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if new.status <> 'pending' then
    return new;
  end if;
  perform 1 from "organization" o where o.id = new."organizationId" for no key update;
  if (select count(*) from invitation i
       where i."organizationId" = new."organizationId" and i.status = 'pending' and i."expiresAt" > now()) >= 100 then
    raise exception 'an organization has at most 100 pending invitations'
      using errcode = '23514', constraint = 'organization_invitation_limit';
  end if;
  return new;
end
$$;
revoke all on function public.organization_invitation_limit() from public, anon, authenticated;

create trigger invitation_within_the_limit before insert on "invitation"
  for each row execute function public.organization_invitation_limit();
