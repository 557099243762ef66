-- An organization has at most 100 members, whoever joins at once (review 92).
--
-- The organization plugin's accept-invitation counts the organization's members, then (after our
-- beforeAcceptInvitation hook's query and the invitation's update) inserts the new one, with nothing holding the count:
-- invitees accepting at once all passed it, and an organization of 99 got to 103. get-full-organization lists at most
-- 100 members (membersLimit is capped at the limit, functions/auth/library-input.ts), so the members past it acted in the
-- organization and were in no listing of it. The rule, for every writer of "member": an insert takes a lock of the
-- organization's row (FOR NO KEY UPDATE, as organization_keeps_an_owner does: two joins of one organization wait for
-- each other) and then counts its members in a statement of its own (READ COMMITTED: it sees the join before it), and
-- refuses the 101st: SQLSTATE 23514, constraint `organization_membership_limit`, which the library's error hook answers
-- as the plugin answers a full organization (403 ORGANIZATION_MEMBERSHIP_LIMIT_REACHED; the plugin puts the invitation
-- back to pending when the member's insert fails). 100 is the plugin's membershipLimit (its default, not configured),
-- MAX_MEMBERS in functions/auth/library-input.ts; tests/identity/organization-membership-limit.pg-only.test.ts holds the
-- two to each other.

create function public.organization_membership_limit() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  perform 1 from "organization" o where o.id = new."organizationId" for no key update;
  if (select count(*) from member m where m."organizationId" = new."organizationId") >= 100 then
    raise exception 'an organization has at most 100 members'
      using errcode = '23514', constraint = 'organization_membership_limit';
  end if;
  return new;
end
$$;
revoke all on function public.organization_membership_limit() from public, anon, authenticated;

create trigger member_within_the_limit before insert on "member"
  for each row execute function public.organization_membership_limit();
