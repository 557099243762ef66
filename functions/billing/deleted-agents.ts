import type { BillingDeps } from './billing-deps.ts';
import { signInUrls } from '../platform/config.ts';
import { first, rows, sql } from '../platform/db.ts';
import { cancelSubscription } from './cancel-subscription.ts';

/**
 * An agent an admin deleted (DELETE /agents/{agentId}: a soft delete, status `inactive`) can no longer be used: its
 * OAuth client is disabled and its tokens revoked (migration 20261122000302), so its backend meters nobody and nobody
 * signs in to it. Its paid subscriptions were left as they were, and Stripe charged their users every period for it
 * (found by a review). So the background work (POST /internal/drain, the Node entry's billing loop) stops their
 * renewal: each live paid subscription of an inactive agent is set to cancel at period end at Stripe, the same cancel a
 * user's own makes (cancel-subscription.ts), and its user is mailed once (migration 20261127000900).
 *
 * Decisions: the period already paid runs out as bought, with no automatic refund (as for a removed user, whether the
 * unused rest of a period is owed is the admins' call, in Stripe's Dashboard, where the payments are); an agent made
 * active again before a round reaches a subscription keeps it renewing, and one already reached ends at its period's
 * end (its user subscribes again); free subscriptions charge nothing and are left alone.
 */

/** Subscriptions handled per round: each is three or four Stripe calls (read, update, read back). */
export const RENEWALS_STOPPED_PER_ROUND = 50;
/** A round stops after this many failures in a row: Stripe is then likely failing for all of them. */
const FAILURES_IN_A_ROW = 3;

export interface DeletedAgentsReport {
  /** subscriptions of deleted agents set to end at their period's end this round */
  renewalsStopped: number;
  /** ones Stripe or the database refused this round (logged; a later round tries again) */
  failed: number;
}

export async function stopRenewalsOfDeletedAgents(deps: BillingDeps): Promise<DeletedAgentsReport> {
  const report: DeletedAgentsReport = { renewalsStopped: 0, failed: 0 };
  if (!deps.payments) return report;
  // In random order: one subscription Stripe keeps refusing does not come first in every round and hold back the rest.
  const due = await rows<{ id: string }>(
    deps.database.db,
    sql`select s.id from public.subscriptions s join public.agents a on a.id = s.agent_id
         where a.status = 'inactive' and s.stripe_subscription_id is not null
           and s.status <> 'canceled' and not s.cancel_at_period_end
         order by random() limit ${RENEWALS_STOPPED_PER_ROUND}`,
  );
  let failuresInARow = 0;
  for (const { id } of due) {
    if (failuresInARow >= FAILURES_IN_A_ROW) break;
    try {
      await cancelSubscription(deps, id, false);
      await mailOnce(deps, id);
      report.renewalsStopped += 1;
      failuresInARow = 0;
    } catch (err) {
      deps.logger.warn("could not stop the renewal of a deleted agent's subscription; a later round retries", { subscriptionId: id, err });
      report.failed += 1;
      failuresInARow += 1;
    }
  }
  if (report.renewalsStopped) deps.logger.info("deleted agents' subscriptions set to end at their period's end", { ...report });
  return report;
}

/** The user's mail, queued in the transaction that marks it sent: only the round whose update returns the row mails. */
async function mailOnce(deps: BillingDeps, subscriptionId: string): Promise<void> {
  await deps.database.db.transaction().execute(async (trx) => {
    const row = await first<{ email: string; agent: string; periodEnd: Date | string }>(
      trx,
      sql`update public.subscriptions s set agent_deleted_mailed_at = ${deps.clock.now()}
            from public.agents a, public."user" u
           where s.id = ${subscriptionId} and s.agent_deleted_mailed_at is null and s.cancel_at_period_end
             and a.id = s.agent_id and u.id = s.user_id
       returning u.email, a.name as agent, s.current_period_end as "periodEnd"`,
    );
    if (!row) return;
    const ends = new Date(row.periodEnd).toISOString().slice(0, 10);
    await deps.mailer.enqueue(trx, {
      to: row.email,
      subject: `${row.agent} was removed from Agent Marketplace: your subscription will not renew`,
      text:
        `${row.agent} has been removed from Agent Marketplace, so your subscription to it will not renew and nothing ` +
        `more will be charged for it. It ends on ${ends}.\n\n` +
        `Your subscriptions and invoices: sign in at ${signInUrls(deps.config).signInUrl}.\n`,
    });
  });
}
