-- The mailbox's owner taking an account back also takes back the agents its previous holder consented to (review 05,
-- finding 1).
--
-- Anyone may sign up with an address that is not theirs (unverified, a password of their own) and, signed in,
-- consent to an agent. The address's owner takes the account back by proving the mailbox: a password reset
-- (better-auth.ts, onPasswordReset) or the claim link of an anonymous purchase made with the address
-- (billing_claim_purchase). Both verified the address and ended every session, refresh token and access token
-- (public.revoke_user_credentials), but not the "oauthConsent" rows: the pre-registrant's consent outlived the
-- takeover, and the agent it was given to got codes for the owner's account with no consent screen, `prompt=none`
-- included (a top-level navigation from the agent's page once the owner signed in), with offline_access and the
-- owner's email. DESIGN.md: "Unverified email is never proof of ownership"; a consent given before the address was
-- proved is not the owner's.
--
-- public.mailbox_takes_account_back is the one rule both paths run: the address is verified and every consent of the
-- account ends. Deleting a consent ends what was issued under it: the trigger consent_withdrawal_revokes_tokens
-- (public.revoke_tokens_of_withdrawn_consent, 20261125001000) ends the client's refresh-token families for the user,
-- deletes its access-token rows and revokes its recorded JWT access tokens; a pending code is refused at the token
-- endpoint, which checks the consent (grantStands). In the order of every other end (20261125001000): the user's row
-- first.
--
-- Every password reset runs it, also of an account verified long ago: a reset is how an owner takes an account back
-- from whoever had it, and a thief who held the password or a session may have consented to a hostile agent from
-- it; left alone, that consent let the agent sign the owner in silently after the reset. The price is one consent
-- screen per agent after a reset, when each agent has to send the user through authorize anyway (the reset ended
-- every refresh token). A password change (the current password known) and a password an admin sets keep the
-- consents. The claim runs it only for an unverified account: a verified one was already its owner's, and the claim
-- then writes no password.
create function public.mailbox_takes_account_back(p_user_id text) returns void
language plpgsql
set search_path = public, pg_temp
as $$
begin
  perform 1 from "user" where id = p_user_id for update;
  update "user" set "emailVerified" = true, "updatedAt" = now() where id = p_user_id and not "emailVerified";
  delete from "oauthConsent" where "userId" = p_user_id;
end
$$;
revoke all on function public.mailbox_takes_account_back(text) from public, anon, authenticated;

-- The claim of an unverified account ends its consents too (the marked line). Everything else is as in
-- 20261126001800.
create or replace function public.billing_claim_purchase(
  p_token_hash text,
  p_user_id text,
  p_password_hash text,
  p_now timestamptz
) returns table (outcome text, stripe_subscription_id text, stripe_customer_id text)
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_claim public.purchase_claims%rowtype;
  v_verified boolean;
begin
  select * into v_claim from public.purchase_claims c where c.token_hash = p_token_hash for update;
  if not found then
    return query select 'unknown'::text, null::text, null::text;
    return;
  end if;
  if v_claim.claimed_at is not null then
    return query select 'used'::text, v_claim.stripe_subscription_id, v_claim.stripe_customer_id;
    return;
  end if;
  if v_claim.abandoned_at is not null then
    return query select 'abandoned'::text, v_claim.stripe_subscription_id, v_claim.stripe_customer_id;
    return;
  end if;
  if v_claim.expires_at <= p_now then
    return query select 'expired'::text, v_claim.stripe_subscription_id, v_claim.stripe_customer_id;
    return;
  end if;

  -- The credential row before the user's row: a password written elsewhere takes them in that order (its trigger
  -- locks the user next, 20261125001000), so taking the user first here deadlocked with it.
  perform 1 from account a where a."userId" = p_user_id and a."providerId" = 'credential' for update;
  select u."emailVerified" into v_verified from "user" u where u.id = p_user_id and lower(u.email) = lower(v_claim.email) for update;
  if not found then
    return query select 'no_account'::text, v_claim.stripe_subscription_id, v_claim.stripe_customer_id;
    return;
  end if;

  update public.purchase_claims c set claimed_at = p_now, claimed_by = p_user_id where c.id = v_claim.id;
  update "user" u set "emailVerified" = true, "updatedAt" = p_now where u.id = p_user_id;

  if not v_verified then
    -- The password trigger of 20261123000401 (account_password_change_revokes_credentials) ends every session,
    -- OAuth token and live access token of the user in this transaction; an account without a credential row
    -- gets the same through the function that trigger calls (resolved when this runs, after every migration).
    update account a set password = p_password_hash, "updatedAt" = p_now
     where a."userId" = p_user_id and a."providerId" = 'credential';
    if not found then
      perform public.revoke_user_credentials(p_user_id);
    end if;
    perform public.mailbox_takes_account_back(p_user_id); -- (added in 20261127000700: the holder's consents end)
  end if;

  insert into public.billing_customers (user_id, stripe_customer_id, account_created, created_at)
  values (p_user_id, v_claim.stripe_customer_id, false, p_now)
  on conflict do nothing;

  return query select 'claimed'::text, v_claim.stripe_subscription_id, v_claim.stripe_customer_id;
end;
$$;
