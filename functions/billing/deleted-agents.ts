import type Stripe from 'stripe';
import type { BillingDeps } from './billing-deps.ts';
import { signInUrls } from '../platform/config.ts';
import { first, rows, sql } from '../platform/db.ts';
import { cancelForDeletedAgent } from './cancel-subscription.ts';
import { callStripe, isStripeMissing, isStripeRefusal, requirePayments } from './payments.ts';
import { billingSubscription } from './subscription-queries.ts';
import { endsWithItsPeriod, readStripeSubscription, syncStripeSubscription } from './subscription-state.ts';

/**
 * An agent an admin deleted (DELETE /agents/{agentId}: a soft delete, status `inactive`) can no longer be used: its
 * OAuth client is disabled and its tokens revoked (migration 20261122000302), so its backend meters nobody and nobody
 * signs in to it. Its paid subscriptions were left as they were, and Stripe charged their users every period for it
 * (found by review 06). So the background work (POST /internal/drain, the Node entry's billing loop) ends their
 * billing, a bounded number per round, each in three steps that can each run again:
 *   1. Stripe's state decides how (review 09: the local row can be behind it): one paid up (active, trialing) is to
 *      end at period end, the period paid for running out as bought (no automatic refund: as for a removed user,
 *      whether the unused rest is owed is the admins' call, in Stripe's Dashboard); one not paid up (past_due: its
 *      renewal's payment failed and Stripe retries it; incomplete, unpaid) ends now and its open invoice is voided,
 *      or Stripe would go on collecting a period of an agent nobody can use (review 08). One paid up and set to end at
 *      Stripe already is the user's own cancel (the portal's, its event not here yet): the row follows, unmarked
 *      (review 10: judged from the row alone, the round took it over and a restore renewed it);
 *   2. the round's mark `agent_deleted_mailed_at` (migration 20261127000900) is set and the user's mail queued, in one
 *      transaction, only if no mark is set and the row is not ending already (a user who chose to leave stays the
 *      owner of that choice): the mark says the round owns this ending, and mails once across concurrent rounds;
 *   3. the Stripe calls (void, then cancel now; or cancel at period end), each idempotent. A failure leaves the row
 *      marked and not ended, and the next round finishes it (its search takes every live row of an inactive agent
 *      not ending yet): the intent is written before Stripe is called (review 09: a failure between the Stripe call
 *      and the mark had lost the row for good).
 * A deletion can be undone: an agent `active` again gets back what the rounds stopped. Each marked, still live
 * subscription renews again at Stripe, its user mailed, the mark cleared (review 08: a mistaken deletion ended every
 * renewal for good, and a user could not even buy again while the ending one was live). A cancel by the user, an
 * admin or a ban clears the mark (cancel-subscription.ts), so it is never undone by a restore (review 09), also one
 * made while a round resumes it: the resume works under a claim; the cancel clears it and leaves a mark of its own,
 * which the rounds put back at Stripe until Stripe has it (reviews 10, 13 and 14; resumeBilling, putBackCancel). A
 * pending downgrade is dropped when the round ends a subscription (Stripe refuses to end one a schedule manages) and is
 * not put back on resume: the user renews at the current tier until a downgrade is scheduled again.
 * A subscription Stripe no longer knows (test data deleted, keys switched) can be neither charged nor renewed: its row
 * is ended here, once. Free subscriptions charge nothing and are left alone.
 */

/** Subscriptions handled per round, each way: each is a few Stripe calls (read, update, read back). */
export const DELETED_AGENT_SUBSCRIPTIONS_PER_ROUND = 50;
/** A round stops after this many failures in a row: Stripe is then likely failing for all of them. */
const FAILURES_IN_A_ROW = 3;

export interface DeletedAgentsReport {
  /** subscriptions of deleted agents whose billing this round ended (set to end at period end, or ended now) */
  renewalsStopped: number;
  /** subscriptions of agents active again renewing again this round */
  renewalsResumed: number;
  /** ones Stripe or the database refused this round (logged; a later round tries again) */
  failed: number;
}

interface Due {
  id: string;
  stripeSubscriptionId: string;
}

type Step = 'stopped' | 'resumed' | 'passed';
type MailKind = 'ending' | 'ended' | 'resumed';

export async function stopRenewalsOfDeletedAgents(deps: BillingDeps): Promise<DeletedAgentsReport> {
  const report: DeletedAgentsReport = { renewalsStopped: 0, renewalsResumed: 0, failed: 0 };
  if (!deps.payments) return report;
  // Each in random order: one subscription Stripe keeps refusing does not come first in every round and hold back the
  // rest. Three searches, each on its own partial index (migrations 20261127000900, 20261127001100, 20261127001900).
  const toEnd = await rows<Due>(
    deps.database.db,
    sql`select s.id, s.stripe_subscription_id as "stripeSubscriptionId"
          from public.subscriptions s join public.agents a on a.id = s.agent_id
         where a.status = 'inactive' and s.stripe_subscription_id is not null and s.status <> 'canceled'
           and not s.cancel_at_period_end
         order by random() limit ${DELETED_AGENT_SUBSCRIPTIONS_PER_ROUND}`,
  );
  const toResume = await rows<Due>(
    deps.database.db,
    sql`select s.id, s.stripe_subscription_id as "stripeSubscriptionId"
          from public.subscriptions s join public.agents a on a.id = s.agent_id
         where s.agent_deleted_mailed_at is not null and a.status = 'active' and s.stripe_subscription_id is not null
           and s.status <> 'canceled'
         order by random() limit ${DELETED_AGENT_SUBSCRIPTIONS_PER_ROUND}`,
  );
  // cancels made while a round resumed the renewal, not yet known to be at Stripe (migration 20261127001900)
  const toCancel = await rows<Due>(
    deps.database.db,
    sql`select s.id, s.stripe_subscription_id as "stripeSubscriptionId"
          from public.subscriptions s
         where s.agent_resume_canceled_at is not null and s.stripe_subscription_id is not null
         order by random() limit ${DELETED_AGENT_SUBSCRIPTIONS_PER_ROUND}`,
  );
  let failuresInARow = 0;
  const work: Array<{ sub: Due; step: (deps: BillingDeps, sub: Due) => Promise<Step>; what: string }> = [
    ...toCancel.map((sub) => ({ sub, step: putBackCancel, what: 'ask Stripe again for a cancel made while a round resumed the renewal' })),
    ...toEnd.map((sub) => ({ sub, step: endBilling, what: "end the billing of a deleted agent's subscription" })),
    ...toResume.map((sub) => ({ sub, step: resumeBilling, what: "resume a restored agent's subscription" })),
  ];
  for (const { sub, step: run, what } of work) {
    if (failuresInARow >= FAILURES_IN_A_ROW) break;
    try {
      const step = await run(deps, sub);
      if (step === 'stopped') report.renewalsStopped += 1;
      if (step === 'resumed') report.renewalsResumed += 1;
      failuresInARow = 0;
    } catch (err) {
      deps.logger.warn(`could not ${what}; a later round retries`, { subscriptionId: sub.id, err });
      report.failed += 1;
      failuresInARow += 1;
    }
  }
  if (report.renewalsStopped || report.renewalsResumed) deps.logger.info("deleted agents' subscriptions: a round's changes", { ...report });
  return report;
}

async function endBilling(deps: BillingDeps, sub: Due): Promise<Step> {
  const { stripe } = requirePayments(deps);
  let current: Stripe.Subscription;
  try {
    current = await readStripeSubscription(deps, sub.stripeSubscriptionId);
  } catch (err) {
    if (!isStripeMissing(err)) throw err;
    await endUnknownToStripe(deps, sub);
    return 'passed';
  }
  if (current.status === 'canceled' || current.status === 'incomplete_expired') {
    await syncStripeSubscription(deps, sub.stripeSubscriptionId); // ended at Stripe already: the row follows
    return 'passed';
  }
  const paidUp = current.status === 'active' || current.status === 'trialing';
  if (paidUp && endsWithItsPeriod(current)) {
    // Set to end at Stripe already (either way Stripe records that: review 76), the row not showing it yet: the user's
    // own cancel (the customer portal's, its event not here yet), or this round's unfinished one (the mark is set
    // then, and stays). The row follows; the round takes no ownership of a user's choice, so a restore never renews it
    // (found by review 10).
    await syncStripeSubscription(deps, sub.stripeSubscriptionId);
    return 'passed';
  }
  const owned = await markAndMail(deps, sub.id, paidUp ? 'ending' : 'ended');
  if (!owned) return 'passed'; // the user (or an admin) chose to end it meanwhile: theirs
  try {
    if (!paidUp) {
      const latest = current.latest_invoice;
      const invoiceId = typeof latest === 'string' ? latest : latest?.id;
      if (invoiceId && (await callStripe(() => stripe.invoices.retrieve(invoiceId))).status === 'open') {
        await callStripe(() => stripe.invoices.voidInvoice(invoiceId));
      }
    }
    await cancelForDeletedAgent(deps, sub.id, !paidUp);
  } catch (err) {
    // another round (another instance) ended it first: what it did stands
    const row = await billingSubscription(deps, sub.id);
    if (!row || !(row.status === 'canceled' || row.cancelAtPeriodEnd)) throw err;
  }
  return 'stopped';
}

/**
 * A round's claim on a resume is another round's to take over after this long (the first one crashed or hung). The
 * wait is an economy (two rounds at once would both ask Stripe to renew), not a rule: a round that finds its claim
 * taken over leaves the finish to the other, and only a cancel's own mark makes it put a cancel back.
 */
const RESUME_CLAIM_MS = 10 * 60_000;

async function resumeBilling(deps: BillingDeps, sub: Due): Promise<Step> {
  const { stripe } = requirePayments(deps);
  // The resume is claimed, then Stripe asked, then the mark and the claim cleared if the claim is still ours; no lock
  // is held while Stripe answers (migration 20261127001800: a row lock held then stalled the subscriber's usage calls,
  // and on the embedded database every request; review 13). A cancel by the user, an admin or a ban clears the mark
  // and the claim before it asks Stripe (cancel-subscription.ts): one before the claim leaves nothing to resume; one
  // after it leaves its own mark, put back at Stripe after our own call, here or by a later round (putBackCancel;
  // reviews 10 and 14: the renewal undid a cancel made meanwhile).
  const claimedAt = deps.clock.now();
  const claimed = await first(
    deps.database.db,
    sql`update public.subscriptions set agent_resume_claimed_at = ${claimedAt}
         where id = ${sub.id} and agent_deleted_mailed_at is not null
           and (agent_resume_claimed_at is null or agent_resume_claimed_at < ${new Date(claimedAt.getTime() - RESUME_CLAIM_MS)})
     returning id`,
  );
  if (!claimed) return 'passed'; // canceled meanwhile, or another round is resuming it
  let outcome: Awaited<ReturnType<typeof unmarkAndMail>>;
  try {
    try {
      await callStripe(() => stripe.subscriptions.update(sub.stripeSubscriptionId, { cancel_at_period_end: false }));
    } catch (err) {
      if (isStripeMissing(err)) {
        await endUnknownToStripe(deps, sub);
        return 'passed';
      }
      // ended at Stripe meanwhile (its period ran out): nothing to resume; the sync below writes what Stripe has
      if (!isStripeRefusal(err)) throw err;
    }
    await syncStripeSubscription(deps, sub.stripeSubscriptionId);
    outcome = await unmarkAndMail(deps, sub.id, claimedAt);
  } catch (err) {
    // the next round finishes it: the claim goes (if the database refuses that too, it lapses after RESUME_CLAIM_MS);
    // a cancel made meanwhile left its own mark, which the next round puts back at Stripe
    await sql`update public.subscriptions set agent_resume_claimed_at = null
               where id = ${sub.id} and agent_resume_claimed_at = ${claimedAt}`
      .execute(deps.database.db)
      .catch((releaseErr) => deps.logger.warn('could not give back a resume claim; it lapses', { subscriptionId: sub.id, err: releaseErr }));
    throw err;
  }
  if (outcome === 'canceled meanwhile') return putBackCancel(deps, sub);
  return outcome === 'resumed' ? 'resumed' : 'passed';
}

/**
 * A cancel by the user, an admin or a ban made while a round resumed the renewal: asked of Stripe again after the
 * round's own call, and its mark cleared once Stripe has it (cleared only if no newer cancel marked it meanwhile).
 */
async function putBackCancel(deps: BillingDeps, sub: Due): Promise<Step> {
  const { stripe } = requirePayments(deps);
  const marked = await first<{ at: Date }>(
    deps.database.db,
    sql`select agent_resume_canceled_at as at from public.subscriptions where id = ${sub.id} and agent_resume_canceled_at is not null`,
  );
  if (!marked) return 'passed';
  try {
    await callStripe(() => stripe.subscriptions.update(sub.stripeSubscriptionId, { cancel_at_period_end: true }));
  } catch (err) {
    // refused: ended at Stripe (an immediate cancel), which is what was asked; unknown: nothing left to charge
    if (!isStripeRefusal(err) && !isStripeMissing(err)) throw err;
  }
  await syncStripeSubscription(deps, sub.stripeSubscriptionId).catch((err) => {
    if (!isStripeMissing(err)) throw err;
  });
  await sql`update public.subscriptions set agent_resume_canceled_at = null
             where id = ${sub.id} and agent_resume_canceled_at = ${marked.at}`.execute(deps.database.db);
  deps.logger.info("a restored agent's subscription was canceled while its renewal resumed: the cancel stands at Stripe", {
    subscriptionId: sub.id,
  });
  return 'passed';
}

/** Stripe does not know it: nothing can charge or renew it, so the row ends here (and its mark goes), once. */
async function endUnknownToStripe(deps: BillingDeps, sub: Due): Promise<void> {
  const now = deps.clock.now();
  await sql`update public.subscriptions
               set status = 'canceled', canceled_at = ${now}, cancel_at_period_end = false, agent_deleted_mailed_at = null,
                   agent_resume_claimed_at = null, agent_resume_canceled_at = null, updated_at = ${now}
             where id = ${sub.id} and status <> 'canceled'`.execute(deps.database.db);
  deps.logger.warn("a deleted or restored agent's subscription is unknown to Stripe: ended here", { subscriptionId: sub.id });
}

/** Step 2: the mark and the user's mail, in one transaction; false when the row is not the round's to end. */
async function markAndMail(deps: BillingDeps, subscriptionId: string, kind: 'ending' | 'ended'): Promise<boolean> {
  return deps.database.db.transaction().execute(async (trx) => {
    const already = await first<{ marked: boolean; ending: boolean }>(
      trx,
      sql`select agent_deleted_mailed_at is not null as marked, cancel_at_period_end as ending
            from public.subscriptions where id = ${subscriptionId} for update`,
    );
    if (!already || already.ending) return false;
    if (already.marked) return true; // an earlier round's, unfinished: the mail went then
    const row = await first<MailRow>(
      trx,
      sql`update public.subscriptions s set agent_deleted_mailed_at = ${deps.clock.now()}
            from public.agents a, public."user" u
           where s.id = ${subscriptionId} and a.id = s.agent_id and u.id = s.user_id
       returning u.email, a.name as agent, s.current_period_end as "periodEnd"`,
    );
    if (row) await deps.mailer.enqueue(trx, mailOf(deps, kind, row));
    return !!row;
  });
}

/**
 * The resume's mark and claim cleared and its mail, in one transaction, while the claim is still this round's and the
 * agent is still active: 'resumed' (mailed), 'not live' (ended at Stripe meanwhile: no mail), 'canceled meanwhile' (a
 * cancel cleared the claim and left its own mark: to be put back at Stripe), or 'passed': another round took a
 * lapsed claim over (it finishes), or the agent was deleted again (only the claim goes: the mark stays the round's,
 * so the next end round stops it and a later restore resumes it; review 14 found the mark cleared and no mail due).
 */
async function unmarkAndMail(
  deps: BillingDeps,
  subscriptionId: string,
  claimedAt: Date,
): Promise<'resumed' | 'not live' | 'canceled meanwhile' | 'passed'> {
  return deps.database.db.transaction().execute(async (trx) => {
    const row = await first<MailRow & { live: boolean }>(
      trx,
      sql`update public.subscriptions s set agent_deleted_mailed_at = null, agent_resume_claimed_at = null
            from public.agents a, public."user" u
           where s.id = ${subscriptionId} and s.agent_resume_claimed_at = ${claimedAt} and a.id = s.agent_id and a.status = 'active'
             and u.id = s.user_id
       returning u.email, a.name as agent, s.current_period_end as "periodEnd",
                 (s.status <> 'canceled' and not s.cancel_at_period_end) as live`,
    );
    if (!row) {
      const now = await first<{ canceled: boolean }>(
        trx,
        sql`select agent_resume_canceled_at is not null as canceled from public.subscriptions where id = ${subscriptionId}`,
      );
      if (now?.canceled) return 'canceled meanwhile';
      await sql`update public.subscriptions set agent_resume_claimed_at = null
                 where id = ${subscriptionId} and agent_resume_claimed_at = ${claimedAt}`.execute(trx);
      return 'passed';
    }
    if (!row.live) return 'not live';
    await deps.mailer.enqueue(trx, mailOf(deps, 'resumed', row));
    return 'resumed';
  });
}

interface MailRow {
  email: string;
  agent: string;
  periodEnd: Date | string;
}

function mailOf(deps: BillingDeps, kind: MailKind, row: MailRow) {
  // row.agent is one line: the database holds agent names to it (20261127005900)
  const account = `Your subscriptions and invoices: sign in at ${signInUrls(deps.config).signInUrl}.\n`;
  if (kind === 'resumed') {
    return {
      to: row.email,
      subject: `${row.agent} is back on Agent Marketplace: your subscription renews again`,
      text:
        `${row.agent} is available on Agent Marketplace again, so your subscription to it renews as before; the next ` +
        `period starts on ${day(row.periodEnd)}. You can cancel it at any time from your account.\n\n${account}`,
    };
  }
  const subject = `${row.agent} was removed from Agent Marketplace: your subscription will not renew`;
  const text =
    kind === 'ending'
      ? `${row.agent} has been removed from Agent Marketplace, so your subscription to it will not renew and nothing ` +
        `more will be charged for it. It ends on ${day(row.periodEnd)}.\n\n${account}`
      : `${row.agent} has been removed from Agent Marketplace, so your subscription to it has ended. Its unpaid ` +
        `invoice is voided: nothing more will be charged for it.\n\n${account}`;
  return { to: row.email, subject, text };
}

const day = (at: Date | string) => new Date(at).toISOString().slice(0, 10);
