-- A user's link to a Stripe customer, and a deleted agent's round's mark, follow what the user did at Stripe (review 81).
--
-- 1. One definition of linking a customer to a user (billing_link_customer), used by every writer: the first paid
--    checkout's new customer, a purchase made signed out and attached on completion (functions/billing/buyer-accounts.ts),
--    and a claimed purchase (billing_claim_purchase, restated below). A user's link to a customer deleted at Stripe
--    (deleted_at, migration 20261127006000) gives way to the purchase's live customer. The claim inserted only
--    (`on conflict do nothing`), so a user who claimed a purchase after their customer was deleted held a live paid
--    subscription while the portal answered "no billing account yet".
-- 2. A customer deleted at Stripe (billing_forget_customer: its customer.deleted event, or Stripe's "No such customer"
--    to a checkout or portal session) leaves the user's link to the customer of another subscription they still hold
--    (a purchase made signed out under the customer Checkout made): that is their billing account now. Before, the
--    portal answered "no billing account yet" to a user paying for an active subscription.
-- 3. A deleted agent's round marks the subscriptions whose renewal it stopped (agent_deleted_mailed_at, migration
--    20261127000900), and a restore renews every marked one. A user who renewed in Stripe's customer portal after the
--    round ("don't cancel"), then canceled there again, kept the mark, so the restore undid their own cancel and billed
--    them a period they had canceled. Now a row that goes from ending to renewing while its agent is deleted (a round
--    resumes only restored agents' rows) loses the mark: the renewal, and whatever the user does next, is theirs.
--    (Undone and redone at Stripe before either event arrives, both events show "ending" and the mark stays: a window
--    of seconds; so does a renewal made after the restore, before the next round resumes it, which mails "is back".)

create or replace function public.billing_link_customer(p_user_id text, p_customer_id text, p_now timestamptz)
returns void
language plpgsql
set search_path = public, pg_temp
as $$
begin
  -- No conflict target: the user may have a customer already (user_id) and the customer may be linked already
  -- (stripe_customer_id); either way the first link stays...
  insert into public.billing_customers (user_id, stripe_customer_id, account_created, created_at)
  values (p_user_id, p_customer_id, false, p_now)
  on conflict do nothing;
  -- ...unless the user's customer was deleted at Stripe: this live one takes its place.
  update public.billing_customers b
     set stripe_customer_id = p_customer_id, deleted_at = null, created_at = p_now
   where b.user_id = p_user_id and b.deleted_at is not null
     and not exists (select 1 from public.billing_customers o where o.stripe_customer_id = p_customer_id);
end;
$$;

create or replace function public.billing_forget_customer(p_customer_id text, p_now timestamptz)
returns void
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_user_id text;
  v_other text;
begin
  update public.billing_customers b set deleted_at = p_now
   where b.stripe_customer_id = p_customer_id and b.deleted_at is null
  returning b.user_id into v_user_id;
  if v_user_id is null then
    return;
  end if;
  select s.stripe_customer_id into v_other
    from public.subscriptions s
   where s.user_id = v_user_id and s.stripe_customer_id is not null and s.stripe_customer_id <> p_customer_id
     and s.stripe_subscription_id is not null and s.status <> 'canceled'
   order by s.created_at desc
   limit 1;
  if v_other is not null then
    perform public.billing_link_customer(v_user_id, v_other, p_now);
  end if;
end;
$$;

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

  perform public.billing_link_customer(p_user_id, v_claim.stripe_customer_id, p_now); -- (this migration: over a deleted link too)

  return query select 'claimed'::text, v_claim.stripe_subscription_id, v_claim.stripe_customer_id;
end;
$$;

create or replace function public.subscriptions_user_renewal_ends_round_mark()
returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  -- Only while the agent is deleted: a round's own resume runs once it is restored, and one whose read-back failed
  -- (its claim given back) leaves the renewal's event to arrive before the next round finishes it and mails "is back".
  if old.cancel_at_period_end and not new.cancel_at_period_end and new.status <> 'canceled'
     and new.agent_deleted_mailed_at is not null and new.agent_resume_claimed_at is null
     and exists (select 1 from public.agents a where a.id = new.agent_id and a.status = 'inactive') then
    new.agent_deleted_mailed_at := null;
  end if;
  return new;
end;
$$;

create trigger subscriptions_user_renewal_ends_round_mark
  before update of cancel_at_period_end on public.subscriptions
  for each row execute function public.subscriptions_user_renewal_ends_round_mark();

revoke execute on function public.billing_link_customer(text, text, timestamptz) from public, anon, authenticated;
revoke execute on function public.billing_forget_customer(text, timestamptz) from public, anon, authenticated;
revoke execute on function public.billing_claim_purchase(text, text, text, timestamptz) from public, anon, authenticated;
revoke execute on function public.subscriptions_user_renewal_ends_round_mark() from public, anon, authenticated;
