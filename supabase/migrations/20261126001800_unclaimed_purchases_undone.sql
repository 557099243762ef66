-- Anonymous purchases nobody claims are undone (functions/billing/unclaimed-purchases.ts). A purchase whose buyer's
-- address belongs to an unverified account attaches to nobody and waits for its claim link (20261123000300). When
-- nobody ever followed the link, Stripe charged the buyer every period for a subscription no account holds, and the
-- buyer had no portal to cancel it from.
--
-- A claim unused 7 days after its latest link expired is now abandoned. The background work marks it first
-- (abandoned_at: from then on the link is refused, below), then refunds and cancels the subscription at Stripe, then
-- marks the undo done (undone_at) in the transaction that queues the mail telling the address. Between the first and
-- the last step a round holds the claim under a lease (undo_leased_until), so concurrent rounds do not both call
-- Stripe for it; should a round die with it, the next one after the lease finishes the undo.
alter table public.purchase_claims
  add column abandoned_at timestamptz(3),
  add column undone_at timestamptz(3),
  add column undo_leased_until timestamptz(3),
  -- A purchase is either claimed (and served) or abandoned (and refunded), never both.
  add constraint purchase_claims_claimed_or_abandoned check (claimed_at is null or abandoned_at is null),
  add constraint purchase_claims_undone_when_abandoned check (undone_at is null or abandoned_at is not null);

-- What every round of the background work looks through: the claims neither used nor undone (the others are done for
-- good), oldest link first.
create index purchase_claims_open on public.purchase_claims (expires_at) where claimed_at is null and undone_at is null;

-- The claim refuses an abandoned claim ('abandoned'), under the claim row's lock: the background work marks a claim
-- abandoned under that lock too, so a claim and an abandonment of one purchase end in exactly one of the two. Checked
-- before the expiry, so the answer says what became of the purchase. Everything else is as in 20261125001100.
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
  if v_claim.abandoned_at is not null then -- (changed in 20261126001800)
    return query select 'abandoned'::text, v_claim.stripe_subscription_id, v_claim.stripe_customer_id; -- (changed in 20261126001800)
    return; -- (changed in 20261126001800)
  end if; -- (changed in 20261126001800)
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
