import type { BillingDeps } from './billing-deps.ts';
import { signInUrls } from '../platform/config.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import { cancelSubscription } from './cancel-subscription.ts';
import { callStripe, isStripeMissing, isStripeRefusal, requirePayments } from './payments.ts';
import { billingSubscription } from './subscription-queries.ts';
import { readStripeSubscription, syncStripeSubscription } from './subscription-state.ts';

/**
 * An agent an admin deleted (DELETE /agents/{agentId}: a soft delete, status `inactive`) can no longer be used: its
 * OAuth client is disabled and its tokens revoked (migration 20261122000302), so its backend meters nobody and nobody
 * signs in to it. Its paid subscriptions were left as they were, and Stripe charged their users every period for it
 * (found by review 06). So the background work (POST /internal/drain, the Node entry's billing loop) ends their
 * billing, a bounded number per round, and mails each user once (the mark `agent_deleted_mailed_at`, migration
 * 20261127000900, written in the mail's transaction):
 *   - one paid up (active) is set to cancel at period end at Stripe, the user's own cancel: the period paid
 *     for runs out as bought, with no automatic refund (as for a removed user, whether the unused rest is owed is the
 *     admins' call, in Stripe's Dashboard, where the payments are);
 *   - one not paid up (past_due: its renewal's payment failed and Stripe retries it; incomplete) is canceled now and
 *     its open invoice voided: Stripe would otherwise go on collecting a period of an agent nobody can use (found by
 *     review 08);
 *   - one Stripe no longer knows (test data deleted, keys switched) has nothing to end: it is marked, so it is not
 *     tried in every round, and left as it is (the webhook treats it the same way).
 * A deletion can be undone (PATCH `status`): an agent active again gets back what its rounds stopped, each
 * subscription set to end by a round (marked, still live, still ending) renewing again at Stripe, its user mailed, the
 * mark cleared (found by review 08: a mistaken deletion ended every subscriber's renewal for good, and a user could
 * not even buy again while the ending one was live). Free subscriptions charge nothing and are left alone.
 */

/** Subscriptions handled per round, each way: each is three or four Stripe calls (read, update, read back). */
export const DELETED_AGENT_SUBSCRIPTIONS_PER_ROUND = 50;
/** A round stops after this many failures in a row: Stripe is then likely failing for all of them. */
const FAILURES_IN_A_ROW = 3;

export interface DeletedAgentsReport {
  /** subscriptions of deleted agents whose billing ended this round (set to end at period end, or ended now) */
  renewalsStopped: number;
  /** subscriptions of agents active again renewing again this round */
  renewalsResumed: number;
  /** ones Stripe or the database refused this round (logged; a later round tries again) */
  failed: number;
}

type Step = 'stopped' | 'resumed' | 'passed';

export async function stopRenewalsOfDeletedAgents(deps: BillingDeps): Promise<DeletedAgentsReport> {
  const report: DeletedAgentsReport = { renewalsStopped: 0, renewalsResumed: 0, failed: 0 };
  if (!deps.payments) return report;
  // Each in random order: one subscription Stripe keeps refusing does not come first in every round and hold back the
  // rest. Two searches, each on its own partial index (migrations 20261127000900, 20261127001100).
  const toEnd = await rows<Due>(
    deps.database.db,
    sql`select s.id, s.stripe_subscription_id as "stripeSubscriptionId", s.status
          from public.subscriptions s join public.agents a on a.id = s.agent_id
         where a.status = 'inactive' and s.stripe_subscription_id is not null and s.status <> 'canceled'
           and not s.cancel_at_period_end and s.agent_deleted_mailed_at is null
         order by random() limit ${DELETED_AGENT_SUBSCRIPTIONS_PER_ROUND}`,
  );
  const toResume = await rows<Due>(
    deps.database.db,
    sql`select s.id, s.stripe_subscription_id as "stripeSubscriptionId", s.status
          from public.subscriptions s join public.agents a on a.id = s.agent_id
         where s.agent_deleted_mailed_at is not null and a.status <> 'inactive' and s.stripe_subscription_id is not null
           and s.status <> 'canceled' and s.cancel_at_period_end
         order by random() limit ${DELETED_AGENT_SUBSCRIPTIONS_PER_ROUND}`,
  );
  let failuresInARow = 0;
  const work = [...toEnd.map((sub) => ({ sub, end: true })), ...toResume.map((sub) => ({ sub, end: false }))];
  for (const { sub, end } of work) {
    if (failuresInARow >= FAILURES_IN_A_ROW) break;
    try {
      const step = end ? await endBilling(deps, sub) : await resumeBilling(deps, sub);
      if (step === 'stopped') report.renewalsStopped += 1;
      if (step === 'resumed') report.renewalsResumed += 1;
      failuresInARow = 0;
    } catch (err) {
      const what = end ? "end the billing of a deleted agent's subscription" : "resume a restored agent's subscription";
      deps.logger.warn(`could not ${what}; a later round retries`, { subscriptionId: sub.id, err });
      report.failed += 1;
      failuresInARow += 1;
    }
  }
  if (report.renewalsStopped || report.renewalsResumed) deps.logger.info("deleted agents' subscriptions: a round's changes", { ...report });
  return report;
}

interface Due {
  id: string;
  stripeSubscriptionId: string;
  status: string;
}

async function endBilling(deps: BillingDeps, sub: Due): Promise<Step> {
  const { stripe } = requirePayments(deps);
  const paidUp = sub.status === 'active';
  try {
    if (paidUp) {
      await cancelSubscription(deps, sub.id, false);
    } else {
      await cancelSubscription(deps, sub.id, true);
      const latest = (await readStripeSubscription(deps, sub.stripeSubscriptionId)).latest_invoice;
      const invoiceId = typeof latest === 'string' ? latest : latest?.id;
      if (invoiceId && (await callStripe(() => stripe.invoices.retrieve(invoiceId))).status === 'open') {
        await callStripe(() => stripe.invoices.voidInvoice(invoiceId));
      }
    }
  } catch (err) {
    if (isStripeMissing(err)) {
      // nothing at Stripe to end: marked, so no round tries it again, and left as it is
      await mark(deps.database.db, sub.id, deps.clock.now());
      deps.logger.warn("a deleted agent's subscription is unknown to Stripe: nothing to end", { subscriptionId: sub.id });
      return 'passed';
    }
    // another round (another instance) ended it first: what it did stands, and the mail still goes once
    const current = await billingSubscription(deps, sub.id);
    if (!current || !(current.status === 'canceled' || current.cancelAtPeriodEnd)) throw err;
  }
  const mailed = await mailOnce(deps, sub.id, paidUp ? 'ending' : 'ended');
  return mailed ? 'stopped' : 'passed';
}

async function resumeBilling(deps: BillingDeps, sub: Due): Promise<Step> {
  const { stripe } = requirePayments(deps);
  try {
    await callStripe(() => stripe.subscriptions.update(sub.stripeSubscriptionId, { cancel_at_period_end: false }));
  } catch (err) {
    // ended at Stripe meanwhile (its period ran out): nothing to resume; the sync below writes what Stripe has
    if (!isStripeRefusal(err)) throw err;
  }
  await syncStripeSubscription(deps, sub.stripeSubscriptionId);
  return (await mailOnce(deps, sub.id, 'resumed')) ? 'resumed' : 'passed';
}

async function mark(db: Db, subscriptionId: string, now: Date): Promise<void> {
  await sql`update public.subscriptions set agent_deleted_mailed_at = ${now}
             where id = ${subscriptionId} and agent_deleted_mailed_at is null`.execute(db);
}

/**
 * The user's mail, queued in the transaction that sets (or, once resumed, clears) the mark: only the round whose
 * update returns the row mails, so concurrent rounds mail once.
 */
async function mailOnce(deps: BillingDeps, subscriptionId: string, kind: 'ending' | 'ended' | 'resumed'): Promise<boolean> {
  return deps.database.db.transaction().execute(async (trx) => {
    const row = await first<{ email: string; agent: string; periodEnd: Date | string }>(
      trx,
      kind === 'resumed'
        ? sql`update public.subscriptions s set agent_deleted_mailed_at = null
                from public.agents a, public."user" u
               where s.id = ${subscriptionId} and s.agent_deleted_mailed_at is not null and s.status <> 'canceled'
                 and not s.cancel_at_period_end and a.id = s.agent_id and u.id = s.user_id
           returning u.email, a.name as agent, s.current_period_end as "periodEnd"`
        : sql`update public.subscriptions s set agent_deleted_mailed_at = ${deps.clock.now()}
                from public.agents a, public."user" u
               where s.id = ${subscriptionId} and s.agent_deleted_mailed_at is null
                 and (case when ${kind}::text = 'ending' then s.cancel_at_period_end and s.status <> 'canceled' else s.status = 'canceled' end)
                 and a.id = s.agent_id and u.id = s.user_id
           returning u.email, a.name as agent, s.current_period_end as "periodEnd"`,
    );
    if (!row) return false;
    await deps.mailer.enqueue(trx, mailOf(deps, kind, row));
    return true;
  });
}

function mailOf(deps: BillingDeps, kind: 'ending' | 'ended' | 'resumed', row: { email: string; agent: string; periodEnd: Date | string }) {
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
        `invoice was voided: nothing more will be charged for it.\n\n${account}`;
  return { to: row.email, subject, text };
}

const day = (at: Date | string) => new Date(at).toISOString().slice(0, 10);
