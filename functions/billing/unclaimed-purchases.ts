import type Stripe from 'stripe';
import type { BillingDeps } from './billing-deps.ts';
import { signInUrls } from '../platform/config.ts';
import { first, sql } from '../platform/db.ts';
import { refundAndCancel } from './duplicate-purchases.ts';
import { isStripeMissing } from './payments.ts';
import { ABANDONED_AFTER_EXPIRY_MS, purchaseName } from './purchase-claims.ts';
import { readStripeSubscription } from './subscription-state.ts';

/**
 * Anonymous purchases nobody claims are undone. When the buyer's address belongs to an unverified account, the
 * purchase attaches to nobody and the address gets a claim link (purchase-claims.ts); if nobody ever follows it,
 * Stripe charges the buyer every period for a subscription no account holds, and the buyer has no portal to cancel
 * from. So a claim still unused ABANDONED_AFTER_EXPIRY_MS after its latest link expired is given up, by the background
 * work (functions/internal/background-work.ts), in three steps, each of which can run again:
 *   1. the claim is marked abandoned, conditionally (unclaimed, not abandoned, expired long enough) and under its row's
 *      lock, which the claim (billing_claim_purchase) takes too: from then on the link is refused, and a claim that
 *      got the row first is passed over and stays claimed;
 *   2. every payment of the subscription's paid invoices is refunded in full and the subscription canceled at once
 *      (refundAndCancel, as for a duplicate: refunds carry idempotency keys, a canceled subscription stays canceled;
 *      Stripe no longer knowing the subscription leaves nothing to undo);
 *   3. the undo is marked done, and in the same transaction the mail to the address is queued; only the round whose
 *      conditional update returns the row queues it, so no two rounds mail twice.
 * A failure in step 2 leaves the claim abandoned but not undone; a round after UNDO_RETRY_MS finishes it, taking it
 * after every claim not yet tried, so one purchase Stripe keeps refusing holds back no other.
 */

/** At most this many purchases undone per round: each is a few Stripe calls, and a round has other work. */
const UNDO_PER_ROUND = 5;

/**
 * A round holds the claim it undoes this long (undo_leased_until): concurrent rounds, on any number of instances, pass
 * over it rather than call Stripe for it too. Longer than one undo takes (a handful of Stripe calls of at most 20 s,
 * each retried twice), so a lease does not run out under a round still working. Only an optimisation: should it run
 * out, both rounds' Stripe calls are idempotent and step 3 still mails once. A round that dies leaves the claim to
 * the first round after the lease.
 */
const UNDO_LEASE_MS = 10 * 60_000;

/**
 * After a failed undo the claim waits this long before it is tried again, then goes behind every claim not yet tried
 * (takeAbandonedClaim's order). An hour: what fails for one purchase is mostly Stripe refusing its refund (a disputed
 * charge stays refused for weeks) or an outage, which an hour mostly outlasts; its subscription is canceled even when
 * the refund is refused (refundAndCancel), so that wait charges the buyer nothing more (after an outage, an hour is
 * still far less than a billing period), and a purchase refused for good costs a few Stripe calls and warn lines an
 * hour rather than a minute.
 */
export const UNDO_RETRY_MS = 60 * 60_000;

/**
 * A round goes on to the next claim after a failure, but stops after this many in a row: Stripe is then likely failing
 * for all of them, and each try costs a few calls (each retried twice) under the rate limit every payment shares.
 */
export const UNDO_FAILURES_IN_A_ROW = 3;

export interface UnclaimedPurchasesReport {
  /** claims given up this round (their links refused from now on) */
  abandoned: number;
  /** given-up purchases refunded, canceled and their address mailed this round */
  undone: number;
}

type Deps = Pick<BillingDeps, 'config' | 'database' | 'logger' | 'clock' | 'mailer' | 'payments'>;

interface TakenClaim {
  id: string;
  email: string;
  stripeSubscriptionId: string;
  newlyAbandoned: boolean;
}

/** One round's share: up to UNDO_PER_ROUND purchases, one at a time. Nothing without payments configured. */
export async function undoUnclaimedPurchases(deps: Deps): Promise<UnclaimedPurchasesReport> {
  const report: UnclaimedPurchasesReport = { abandoned: 0, undone: 0 };
  if (!deps.payments) return report;
  let failuresInARow = 0;
  for (let n = 0; n < UNDO_PER_ROUND && failuresInARow < UNDO_FAILURES_IN_A_ROW; n++) {
    const leasedUntil = new Date(deps.clock.now().getTime() + UNDO_LEASE_MS);
    const claim = await takeAbandonedClaim(deps, leasedUntil);
    if (!claim) break;
    if (claim.newlyAbandoned) report.abandoned += 1;
    try {
      if (await undo(deps, claim)) report.undone += 1;
      failuresInARow = 0;
    } catch (err) {
      deps.logger.warn('could not undo an unclaimed purchase; a later round retries', { stripeSubscriptionId: claim.stripeSubscriptionId, err });
      await retryLater(deps, claim, leasedUntil).catch(() => {}); // else its lease runs out: retried then
      failuresInARow += 1;
    }
  }
  return report;
}

/**
 * Step 1, and the lease: the next claim to give up or to finish giving up that no round holds. SKIP LOCKED passes
 * over a claim whose row a claim in progress holds (it is claimed, or refused once this marks it); the conditions are
 * checked again on the row as locked, so a claim used or a link renewed meanwhile is left alone.
 *
 * Claims are taken in the order of their lease's end if they had one, else their link's expiry. A claim not yet tried
 * is due only once its link expired a week ago or more; one tried before (a failure, a round that died) sorts by when
 * its lease ran out, recent whenever rounds run: so a failed claim comes after every claim not yet tried, rather than
 * first again in every round (found by a review: the oldest claim, failing, was taken first by every round, which
 * stopped there, and the buyers of the claims behind it went on being charged). Nor is it passed over for good:
 * claims whose links expire after its retry come after it. The open claims are few (purchases waiting on a link), so
 * sorting them is cheap.
 */
async function takeAbandonedClaim(deps: Deps, leasedUntil: Date): Promise<TakenClaim | undefined> {
  const now = deps.clock.now();
  const expiredBy = new Date(now.getTime() - ABANDONED_AFTER_EXPIRY_MS);
  return first<TakenClaim>(
    deps.database.db,
    sql`with taken as (
          select c.id, c.abandoned_at is null as newly_abandoned
            from public.purchase_claims c
           where c.claimed_at is null and c.undone_at is null
             and (c.abandoned_at is not null or c.expires_at <= ${expiredBy})
             and (c.undo_leased_until is null or c.undo_leased_until <= ${now})
           order by coalesce(c.undo_leased_until, c.expires_at)
           limit 1
           for update skip locked
        )
        update public.purchase_claims c
           set abandoned_at = coalesce(c.abandoned_at, ${now}), undo_leased_until = ${leasedUntil}
          from taken t
         where c.id = t.id
        returning c.id, c.email, c.stripe_subscription_id as "stripeSubscriptionId", t.newly_abandoned as "newlyAbandoned"`,
  );
}

/** Steps 2 and 3. False when another round marked it done first (after this one's lease ran out). */
async function undo(deps: Deps, claim: TakenClaim): Promise<boolean> {
  let subscription: Stripe.Subscription | undefined;
  try {
    subscription = await readStripeSubscription(deps, claim.stripeSubscriptionId);
  } catch (err) {
    // Stripe no longer knows it (another account, deleted test data): nothing to refund or cancel, and nothing to
    // tell the address that would be true.
    if (!isStripeMissing(err)) throw err;
  }
  const refunds = subscription
    ? await refundAndCancel(deps, subscription, { metadata: { why: 'unclaimed', purchaseClaimId: claim.id } })
    : [];
  const bought = { agentId: subscription?.metadata?.agentId, tierId: subscription?.metadata?.tierId };
  const mail = subscription ? undoneMail(deps, claim.email, await purchaseName(deps, bought)) : undefined;
  const done = await deps.database.db.transaction().execute(async (trx) => {
    const row = await first<{ id: string }>(
      trx,
      sql`update public.purchase_claims set undone_at = ${deps.clock.now()}, undo_leased_until = null
           where id = ${claim.id} and undone_at is null
       returning id`,
    );
    if (row && mail) await deps.mailer.enqueue(trx, mail);
    return !!row;
  });
  if (!done) return false;
  // The address and the token stay out of the log: the subscription id leads to both for whoever may see them.
  if (subscription) deps.logger.warn('unclaimed purchase canceled and refunded', { stripeSubscriptionId: claim.stripeSubscriptionId, refunds });
  else deps.logger.info('unclaimed purchase unknown to Stripe: nothing to refund or cancel', { stripeSubscriptionId: claim.stripeSubscriptionId });
  return true;
}

/** After a failure: the lease ends UNDO_RETRY_MS from now, if this round still holds it (its end is the holder's mark). */
async function retryLater(deps: Deps, claim: TakenClaim, leasedUntil: Date): Promise<void> {
  await sql`update public.purchase_claims set undo_leased_until = ${new Date(deps.clock.now().getTime() + UNDO_RETRY_MS)}
             where id = ${claim.id} and undone_at is null and undo_leased_until = ${leasedUntil}`.execute(deps.database.db);
}

function undoneMail(deps: Deps, email: string, purchase: string) {
  const { signInUrl } = signInUrls(deps.config);
  return {
    to: email,
    subject: 'Your Agent Marketplace purchase was canceled and refunded',
    text:
      `Someone bought ${purchase} on Agent Marketplace and gave ${email} as their address.\n\n` +
      `An Agent Marketplace account with this address exists, but the address was never confirmed, and the link we ` +
      `mailed to confirm it and add the purchase to the account was not used. So the purchase was never added to ` +
      `any account: it has been canceled, and every payment for it refunded in full. Nothing more will be charged ` +
      `for it. A refund can take several days to show on a statement.\n\n` +
      `If you made this purchase and still want it: sign in with this address at ${signInUrl} (if you do not know ` +
      `the password, ask for a reset link on the sign-in page; using it confirms the address), then buy again.\n\n` +
      `If you did not buy anything, ignore this mail.\n`,
  };
}
