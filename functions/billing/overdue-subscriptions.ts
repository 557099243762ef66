import type { BillingDeps } from './billing-deps.ts';
import { rows, sql } from '../platform/db.ts';
import { isStripeMissing } from './payments.ts';
import { syncStripeSubscription } from './subscription-state.ts';

/**
 * Paid subscriptions overdue for word from Stripe are read again (migration 20261127003200; found by review 15).
 * A paid row changes only when a Stripe event about it arrives, and Stripe gives up on a webhook delivery after three
 * days: an endpoint down that long left a subscription canceled at Stripe `active` here for good (served with nothing
 * paid), and one renewed stuck in its old period. Stripe renews or ends a subscription at its period's end, so a live
 * paid row whose period ended a day ago has missed an event: each round reads a few of them from Stripe, oldest period
 * first, and writes what Stripe says through the one writer (syncStripeSubscription), as an event would.
 * A row read recently (stripe_checked_at, 6 hours) is passed over, so one whose read changes nothing costs a Stripe
 * call a few times a day, not every round. Any number of rounds at once: each takes its rows with SKIP LOCKED.
 */

/** How long after its period's end a live paid row counts as overdue: Stripe's renewal events come within the hour. */
export const OVERDUE_AFTER_MS = 24 * 60 * 60_000;
/** How long before the same row is read again when its read changed nothing. */
const READ_AGAIN_AFTER_MS = 6 * 60 * 60_000;
/** Rows read per round: one Stripe read each, and normally there are none. */
const PER_ROUND = 20;

export interface OverdueSubscriptionsReport {
  /** paid subscriptions read again from Stripe and written this round */
  reread: number;
  /** ones Stripe or the database refused this round (logged; read again after 6 hours) */
  failed: number;
}

export async function rereadOverdueSubscriptions(deps: BillingDeps): Promise<OverdueSubscriptionsReport> {
  const report: OverdueSubscriptionsReport = { reread: 0, failed: 0 };
  if (!deps.payments) return report;
  const now = deps.clock.now();
  const taken = await rows<{ stripeSubscriptionId: string }>(
    deps.database.db,
    sql`with due as (
          select s.id from public.subscriptions s
           where s.stripe_subscription_id is not null and s.status <> 'canceled'
             and s.current_period_end <= ${new Date(now.getTime() - OVERDUE_AFTER_MS)}
             and (s.stripe_checked_at is null or s.stripe_checked_at <= ${new Date(now.getTime() - READ_AGAIN_AFTER_MS)})
           order by s.current_period_end
           limit ${PER_ROUND}
           for update skip locked
        )
        update public.subscriptions s set stripe_checked_at = ${now}
          from due where s.id = due.id
        returning s.stripe_subscription_id as "stripeSubscriptionId"`,
  );
  for (const { stripeSubscriptionId } of taken) {
    try {
      await syncStripeSubscription(deps, stripeSubscriptionId);
      report.reread += 1;
    } catch (err) {
      report.failed += 1;
      // Ids only. Stripe not knowing it (test data deleted, keys switched) is said as such: an operator's to look at.
      deps.logger.warn(
        isStripeMissing(err)
          ? 'an overdue paid subscription is unknown to Stripe; it stays as it is'
          : 'could not read an overdue paid subscription from Stripe; it is read again in 6 hours',
        { stripeSubscriptionId, err },
      );
    }
  }
  if (report.reread > 0) deps.logger.warn('paid subscriptions overdue for a Stripe event read again from Stripe (is the webhook endpoint receiving?)', { ...report });
  return report;
}
