-- A purchase claim (20261123000300) locked the claimant's user row and then wrote the account's password; a
-- password change writes the account row first and its trigger (public.revoke_user_credentials, which since
-- 20261125001000 begins by locking the user's row) the user row next. A claim and a password change of the same
-- account at the same moment deadlocked, and one of them answered 500. The claim now takes the credential row
-- first, in the password writers' order. Everything else is as before.
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
  end if;

  insert into public.billing_customers (user_id, stripe_customer_id, account_created, created_at)
  values (p_user_id, v_claim.stripe_customer_id, false, p_now)
  on conflict do nothing;

  return query select 'claimed'::text, v_claim.stripe_subscription_id, v_claim.stripe_customer_id;
end;
$$;
