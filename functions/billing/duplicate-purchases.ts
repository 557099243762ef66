import type Stripe from 'stripe';
import type { BillingDeps } from './billing-deps.ts';
import { first, sql } from '../platform/db.ts';
import { callStripe, isStripeMissing, isStripeRefusal, requirePayments } from './payments.ts';

/**
 * A second paid subscription to an agent the user already pays for: the webhook answers it `conflict` and writes
 * nothing (one live subscription per user and agent). Checkout refuses a second purchase, but not one already under
 * way: two checkouts opened before either was paid (two tabs, a double click), or an anonymous checkout by a buyer
 * who turns out to be subscribed. Stripe charged for it and would go on charging every period for nothing. Found by
 * a hostile review. So the purchase is undone at Stripe: every payment of the duplicate's paid invoices is refunded
 * in full (reason `duplicate`) and the subscription canceled at once.
 *
 * First the subscription the user keeps is read from Stripe again: if it has in fact ended (its cancellation's event
 * not processed yet), the new one is no duplicate and is written after all (`kept_is_gone`); if it is not paid yet
 * and the new one is, the unpaid one is ended at Stripe instead and the new one written (`kept_is_gone` too). Every
 * step can run again (a refunded payment is skipped, a canceled subscription stays canceled), so a failure is retried
 * by Stripe's redelivery of the event: the event stays unrecorded until it is done (writeStripeRead) and the webhook answers 5xx.
 */
export type DuplicateOutcome = 'refunded' | 'kept_is_gone';

export async function undoDuplicatePurchase(
  deps: BillingDeps,
  duplicate: Stripe.Subscription,
  keptSubscriptionId: string,
  duplicateGrantsAccess: boolean,
  resync: (stripeSubscriptionId: string) => Promise<unknown>,
): Promise<DuplicateOutcome> {
  const kept = await first<{ stripeSubscriptionId: string | null }>(
    deps.database.db,
    sql`select stripe_subscription_id as "stripeSubscriptionId" from public.subscriptions where id = ${keptSubscriptionId}`,
  );
  try {
    if (kept?.stripeSubscriptionId) await resync(kept.stripeSubscriptionId);
  } catch (err) {
    // Stripe no longer knows the kept one (another account, deleted test data): it stays as written
    if (!isStripeMissing(err)) throw err;
  }
  const still = await first<{ live: boolean; paid: boolean }>(
    deps.database.db,
    sql`select status <> 'canceled' as live, public.subscription_grants_access(status) as paid
          from public.subscriptions where id = ${keptSubscriptionId}`,
  );
  if (!still?.live) return 'kept_is_gone';
  const { stripe } = requirePayments(deps);
  // The kept one is not paid (its first payment pending: incomplete) and this one is: this one is kept instead, and
  // the unpaid one ended at Stripe (it charged nothing; Stripe voids its open invoice). Found by a review: the paid
  // card subscription was refunded in favour of a bank debit still pending.
  if (!still.paid && duplicateGrantsAccess && kept?.stripeSubscriptionId) {
    try {
      await callStripe(() => stripe.subscriptions.cancel(kept.stripeSubscriptionId!));
      await resync(kept.stripeSubscriptionId);
    } catch (err) {
      if (!isStripeMissing(err)) throw err;
      // Stripe does not know it (another account, deleted test data): nothing will ever say it ended, so it is
      // ended here, or the paid one would never be written (and checkout would refuse every new purchase)
      await sql`update public.subscriptions set status = 'canceled', canceled_at = ${deps.clock.now()}, updated_at = ${deps.clock.now()}
                where id = ${keptSubscriptionId} and status <> 'canceled'`.execute(deps.database.db);
    }
    return 'kept_is_gone';
  }

  const refunds = await refundAndCancel(deps, duplicate, { reason: 'duplicate', metadata: { duplicateOf: keptSubscriptionId } });
  deps.logger.warn('duplicate paid subscription canceled and refunded', {
    stripeSubscriptionId: duplicate.id,
    keptSubscriptionId,
    refunds,
  });
  return 'refunded';
}

/**
 * A purchase the marketplace will not serve, undone at Stripe: every payment of the subscription's paid invoices
 * refunded in full, then the subscription canceled at once. Refunds first: a redelivery after a failure between the
 * two still finds the subscription live and finishes. Each step can run again (a refunded payment is skipped, by its
 * idempotency key and by Stripe's `charge_already_refunded`; a canceled subscription stays canceled).
 *
 * A refund Stripe refuses (a 4xx: a disputed charge, `charge_disputed`) may be refused for weeks, and the buyer must
 * not be charged another period meanwhile: the other payments are still refunded and the subscription still
 * canceled, then the refusal is thrown, so that the caller fails and retries (found by a review: the refusal was
 * thrown before the cancel, and Stripe went on charging). The unclaimed-purchase undo retries the refund; a webhook's
 * undos meet only a live subscription, so their redelivery writes the canceled one and leaves the refund to the
 * operator the warn line tells. Stripe not finding what it is asked to refund is no such refusal but a failure like
 * any other: the subscription stays live and the redelivery finishes.
 */
export async function refundAndCancel(
  deps: Pick<BillingDeps, 'payments' | 'logger'>,
  subscription: Stripe.Subscription,
  why: { reason?: 'duplicate'; metadata: Record<string, string> },
): Promise<Array<{ invoiceId: string; amount: number }>> {
  const { stripe } = requirePayments(deps);
  const refunded: Array<{ invoiceId: string; amount: number }> = [];
  let refused: unknown;
  const invoices = await callStripe(() => stripe.invoices.list({ subscription: subscription.id, status: 'paid', limit: 100 }));
  for (const invoice of invoices.data) {
    const payments = await callStripe(() => stripe.invoicePayments.list({ invoice: invoice.id!, limit: 100 }));
    for (const payment of payments.data) {
      const paymentIntent = payment.payment.payment_intent;
      const intentId = typeof paymentIntent === 'string' ? paymentIntent : paymentIntent?.id;
      if (payment.status !== 'paid' || !intentId) continue;
      try {
        await callStripe(() =>
          stripe.refunds.create(
            { payment_intent: intentId, ...(why.reason ? { reason: why.reason } : {}), metadata: { ...why.metadata, stripeSubscriptionId: subscription.id } },
            { idempotencyKey: `refund-duplicate:${payment.id}` },
          ),
        );
        refunded.push({ invoiceId: invoice.id!, amount: payment.amount_paid ?? 0 });
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code === 'charge_already_refunded') continue;
        if (!isStripeRefusal(err) || isStripeMissing(err)) throw err;
        // For an operator: a purchase whose refund Stripe keeps refusing shows up at each try. Ids and Stripe's code
        // only: the subscription id leads to the buyer for whoever may see them.
        deps.logger.warn('stripe refused a refund; the subscription is canceled all the same', {
          stripeSubscriptionId: subscription.id,
          invoiceId: invoice.id,
          code,
        });
        refused ??= err;
      }
    }
  }
  if (subscription.status !== 'canceled' && subscription.status !== 'incomplete_expired') {
    try {
      await callStripe(() => stripe.subscriptions.cancel(subscription.id));
    } catch (err) {
      // canceled meanwhile (the customer, the Dashboard): what this step wants
      if (!isStripeMissing(err)) throw err;
    }
  }
  if (refused) throw refused;
  return refunded;
}
