-- An invitation stands only while its inviter may still send it, and a password reset ends the invitations the
-- account had pending (review 10, findings 3 and 4).
--
-- 3. The rule of 20261127000800 (an invitation stands while its inviter is a member and not banned) did not look at
--    the inviter's role: an owner who demoted a rogue admin to member, instead of removing them, left the rogue's
--    pending admin invitation standing, and the rogue's second account joined as admin, with rights the rogue no
--    longer had. Now it stands while the inviter, a standing member, holds a role that may send it, as the
--    organization plugin judges sending (its default roles, the only ones configured: owner and admin may invite,
--    and an invitation whose role holds "owner" needs an owner). A role change cancels the member's pending
--    invitations that no longer stand, as a departure or a ban cancels them.
-- 4. A password reset ends the account's consents (20261127000700: the owner takes the account back from whoever
--    held it, who may have consented from it), but not the invitations that holder sent from it: a thief with the
--    owner's session invited their own address as owner, and after the owner's reset accepted and removed the owner
--    from their own organization. Taking an account back now cancels its pending invitations too, on both paths
--    that run it (the reset and the claim of an unverified account).
drop function public.invitation_inviter_stands(text, text);

create function public.invitation_stands(p_organization_id text, p_inviter_id text, p_role text) returns boolean
language sql stable
set search_path = public, pg_temp
as $$
  select exists (select 1 from member m join "user" u on u.id = m."userId"
                  where m."organizationId" = p_organization_id and m."userId" = p_inviter_id
                    and not public.banned_at(u.banned, u."banExpires", now())
                    and (public.organization_role_has(m.role, 'owner')
                         or (public.organization_role_has(m.role, 'admin')
                             and not public.organization_role_has(p_role, 'owner'))))
$$;
revoke all on function public.invitation_stands(text, text, text) from public, anon, authenticated;

create function public.role_change_cancels_invitations() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  update invitation i set status = 'canceled'
   where i."organizationId" = old."organizationId" and i."inviterId" = old."userId" and i.status = 'pending'
     and not public.invitation_stands(i."organizationId", i."inviterId", i.role);
  return null;
end
$$;
revoke all on function public.role_change_cancels_invitations() from public, anon, authenticated;

create trigger member_role_change_cancels_invitations after update of role, "organizationId" on "member"
  for each row when (new.role is distinct from old.role or new."organizationId" is distinct from old."organizationId")
  execute function public.role_change_cancels_invitations();

-- As in 20261127000700, plus the marked line.
create or replace function public.mailbox_takes_account_back(p_user_id text) returns void
language plpgsql
set search_path = public, pg_temp
as $$
begin
  perform 1 from "user" where id = p_user_id for update;
  update "user" set "emailVerified" = true, "updatedAt" = now() where id = p_user_id and not "emailVerified";
  delete from "oauthConsent" where "userId" = p_user_id;
  update invitation set status = 'canceled' where "inviterId" = p_user_id and status = 'pending'; -- (20261127001600)
end
$$;

-- Invitations left pending by inviters demoted before this migration.
update invitation i set status = 'canceled'
 where i.status = 'pending' and not public.invitation_stands(i."organizationId", i."inviterId", i.role);
