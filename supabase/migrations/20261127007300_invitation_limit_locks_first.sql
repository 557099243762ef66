-- The pending-invitation limit takes the organization's row before the address's pending invitation (review 102's lead).
--
-- 20261127006800's trigger (invitation_within_the_limit) sorted after invitation_replaces_pending, so an invitation's
-- insert locked the address's pending invitation (cancelling it) and then the organization's row. Every other writer
-- takes them the other way round: an owner leaving, removed or demoted locks the organization (member_keeps_an_owner)
-- and then cancels that member's pending invitations. A re-invite racing such a departure could deadlock (one of the
-- two answered 503). The limit now runs first (triggers fire in name order: invitation_counted_... before
-- invitation_replaces_pending), and counts the organization's pending invitations other than the address's own, which
-- the re-invite replaces (as the plugin counts after it has cancelled that one), so a re-invite into a full
-- organization still replaces its invitation.

drop trigger invitation_within_the_limit on "invitation";

create or replace function public.organization_invitation_limit() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if new.status <> 'pending' then
    return new;
  end if;
  perform 1 from "organization" o where o.id = new."organizationId" for no key update;
  if (select count(*) from invitation i
       where i."organizationId" = new."organizationId" and i.status = 'pending' and i."expiresAt" > now()
         and lower(i.email) <> lower(new.email)) >= 100 then
    raise exception 'an organization has at most 100 pending invitations'
      using errcode = '23514', constraint = 'organization_invitation_limit';
  end if;
  return new;
end
$$;
revoke all on function public.organization_invitation_limit() from public, anon, authenticated;

create trigger invitation_counted_within_the_limit before insert on "invitation"
  for each row execute function public.organization_invitation_limit();
