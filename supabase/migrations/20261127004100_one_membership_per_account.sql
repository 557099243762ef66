-- One account holds at most one membership of an organization, and one address at most one pending invitation to it
-- (review 24, finding 3).
--
-- The organization plugin's invite-member looks for the address's pending invitation, cancels the first it found
-- (cancelPendingInvitationsOnReInvite) and writes the new one, with no lock and no unique rule: two invitations of one
-- address sent at once (an honest double-click does it) both stayed pending. Its accept-invitation never asks whether
-- the account is already a member, and "member" had no unique (organizationId, userId): the account accepted both and
-- held two rows. remove-member and update-member-role act on one row, so a member the owner removed stayed a member
-- through the other (still reading the organization, still inviting as admin), and a demoted admin kept the role.
--
--   * "member" is unique per (organization, account). A second membership (an invitation accepted by an account that
--     joined meanwhile) is refused by the index, answered as the plugin answers inviting a member: 400
--     USER_IS_ALREADY_A_MEMBER_OF_THIS_ORGANIZATION (functions/auth/organization-memberships.ts, through the library's
--     onAPIError); the plugin puts the invitation back to pending (it is not used up by a refused acceptance).
--   * An address has at most one pending invitation per organization (a partial unique index), and writing one cancels
--     the pending one it replaces under a lock per (organization, address), taken in a BEFORE INSERT trigger and held
--     to the end of the insert's transaction: of two invitations sent at once the later waits, then replaces the
--     earlier one exactly as a re-invite does one at a time (both answered 200, the later one's link the live one).
--
-- Rows an earlier race left are merged first: of an account's memberships of one organization the one with the
-- highest role stays (owner, then admin, then member; the oldest of equals), the others go; of an address's pending
-- invitations to one organization the newest stays, the others are canceled. The duplicate memberships go with the
-- trigger that cancels a departing member's invitations switched off: the account stays a member, so what it sent
-- stands (the owner rule, member_keeps_an_owner, still runs: the row kept holds the highest role).

alter table "member" disable trigger member_departure_cancels_invitations;
delete from "member" m
 using (select id, row_number() over (partition by "organizationId", "userId"
                                      order by public.organization_role_has(role, 'owner') desc,
                                               public.organization_role_has(role, 'admin') desc,
                                               "createdAt", id) as rank
          from "member") d
 where m.id = d.id and d.rank > 1;
alter table "member" enable trigger member_departure_cancels_invitations;

create unique index member_one_per_account on "member" ("organizationId", "userId");

update "invitation" i set status = 'canceled'
  from (select id, row_number() over (partition by "organizationId", lower(email) order by "createdAt" desc, id desc) as rank
          from "invitation" where status = 'pending') d
 where i.id = d.id and d.rank > 1;

create unique index invitation_one_pending_per_address on "invitation" ("organizationId", lower(email)) where status = 'pending';

-- A new pending invitation replaces the address's pending one, under a lock per (organization, address).
create function public.invitation_replaces_pending() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  perform pg_advisory_xact_lock(hashtextextended('invitation:' || new."organizationId" || '|' || lower(new.email), 0));
  -- (a statement of its own, READ COMMITTED: it sees the invitation the lock's previous holder committed)
  update invitation set status = 'canceled'
   where "organizationId" = new."organizationId" and lower(email) = lower(new.email) and status = 'pending';
  return new;
end
$$;
revoke all on function public.invitation_replaces_pending() from public, anon, authenticated;

create trigger invitation_replaces_pending before insert on "invitation"
  for each row when (new.status = 'pending') execute function public.invitation_replaces_pending();
