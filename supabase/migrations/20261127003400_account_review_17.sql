-- An invitation refused after its inviter's daily claim was taken gives the claim back (review 17, finding 2;
-- functions/auth/invitation-rules.ts).
--
-- The inviter's claim (public.invitation_claim, 20261126000700) is now taken before the organization plugin's
-- invite-member route runs, so that a refused call cancels nothing (the plugin cancels the pending invitation a
-- re-invite replaces before its own beforeCreateInvitation hook, where the claim was taken until now). The route
-- still refuses a few calls after that (an invalid address, someone already a member): such a call gives its claim
-- back here, instead of leaving it to count against the inviter for 5 minutes. Claims not yet turned into an
-- invitation are alike, so the newest open one goes; one a concurrent invitation is consuming right now is skipped.
create function public.invitation_claim_give_back(p_inviter_id text, p_now timestamptz) returns void
language sql volatile
set search_path = public, pg_temp
as $$
  delete from public.invitation_claims
   where id = (select c.id from public.invitation_claims c
                where c.inviter_id = p_inviter_id and c.invitation_id is null and c.created_at >= p_now - interval '5 minutes'
                order by c.id desc limit 1 for update skip locked)
$$;
revoke execute on function public.invitation_claim_give_back(text, timestamptz) from public, anon, authenticated;
