-- Contract revision 2, "Anonymous purchases": a purchase made without an account attaches at once only to a new
-- account (made for it) or to an account whose email is verified. When an unverified account holds the buyer's
-- email, nothing attaches to it: the address gets a single-use claim link, and following it proves control of
-- the address, verifies it, and attaches the purchase (and the Stripe customer) to the account holding it.
--
-- One row per Stripe subscription bought that way. Only the SHA-256 of the mailed token is stored (hex), so the
-- table does not hold a usable link. Until the claim is used, the subscription has no local row at all (Stripe
-- keeps it; webhook events about it are recorded and change nothing); the claim writes it.
create table public.purchase_claims (
  id uuid primary key default gen_random_uuid(),
  token_hash text not null,
  email text not null,
  stripe_subscription_id text not null,
  stripe_customer_id text not null,
  stripe_checkout_session_id text,
  expires_at timestamptz(3) not null,
  claimed_at timestamptz(3),
  claimed_by text references "user" (id) on delete set null,
  created_at timestamptz(3) not null default now(),
  constraint purchase_claims_token_key unique (token_hash),
  constraint purchase_claims_subscription_key unique (stripe_subscription_id)
);
alter table public.purchase_claims enable row level security;
-- No policies and no grants: only the service (table owner) reads or writes claims.
revoke all on public.purchase_claims from anon, authenticated;

-- Uses a claim, in one transaction, for the account that holds the claim's address now (p_user_id):
--   * the claim is used once: a second use, an expired or an unknown token changes nothing ('used', 'expired',
--     'unknown');
--   * the address is marked verified (the claimant just proved control of it);
--   * when it was not verified before, whoever set the account's password never proved the address was theirs
--     (the pre-hijack case): the password is replaced by p_password_hash (random; the claimant chooses a new one
--     in the set-password step) and every session, OAuth token and live access token of the account ends;
--   * the Stripe customer is linked to the account when the account has none yet.
-- The subscription itself is written afterwards by the one writer (billing_apply_stripe_subscription).
create function public.billing_claim_purchase(
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
