import type Stripe from 'stripe';
import type { BillingDeps } from './billing-deps.ts';
import { first, sql } from '../platform/db.ts';
import { callStripe, isStripeMissing, requirePayments } from './payments.ts';
import { applyStripeState, idOf, syncStripeSubscription, type ApplyOutcome } from './subscription-state.ts';

/**
 * A chargeback ends the subscription whose payment it took back (`charge.dispute.created`; found by a review: the
 * event was ignored, so a buyer who paid, used the agent and had their bank take the money back kept access, and
 * Stripe charged the next period, which they could dispute again). Stripe never ends a subscription over a dispute,
 * so the marketplace cancels it at Stripe at once (no proration, no refund: the disputed amount is already gone) and
 * writes Stripe's state as every event does: the subscription is `canceled`, its agent hears
 * `subscription.canceled`, and the buyer can buy again. A dispute the marketplace later wins changes nothing here:
 * the buyer buys again if they want the agent.
 *
 * The disputed payment leads to its subscription through Stripe's invoice payments (payment intent -> invoice ->
 * subscription). Only a subscription this deployment knows (a row, an anonymous purchase waiting for its claim, or one
 * of a tier's prices) is canceled: one of another deployment on the same Stripe account is not ours to end. The price
 * counts because Stripe does not deliver events in order: a dispute delivered before its purchase's own events found
 * no row, was recorded for good, and the late events then wrote the purchase live, served and charged on (review 65);
 * canceled at Stripe first, it is written canceled by those events, which write what Stripe says. A payment of no
 * subscription, or one Stripe no longer has, is recorded and nothing else. A failure leaves the event unrecorded, so
 * Stripe's redelivery runs this again; the cancel is idempotent (an ended subscription is not canceled twice).
 */
export async function endDisputedSubscription(
  deps: BillingDeps,
  event: Stripe.Event,
  ref: { id: string; type: string },
): Promise<ApplyOutcome> {
  const dispute = event.data.object as Stripe.Dispute;
  const stripeSubscriptionId = await disputedSubscription(deps, dispute);
  const { stripe } = requirePayments(deps);
  const current = stripeSubscriptionId
    ? await callStripe(() => stripe.subscriptions.retrieve(stripeSubscriptionId)).catch((err) => {
        if (isStripeMissing(err)) return undefined;
        throw err;
      })
    : undefined;
  if (!stripeSubscriptionId || !current || !(await knownHere(deps, stripeSubscriptionId, current.items.data[0]?.price.id))) {
    return (await applyStripeState(deps, { event: ref })).outcome;
  }
  if (current.status !== 'canceled' && current.status !== 'incomplete_expired') {
    try {
      await callStripe(() => stripe.subscriptions.cancel(stripeSubscriptionId, {}, { idempotencyKey: `dispute:${dispute.id}` }));
    } catch (err) {
      // gone from Stripe, or ended meanwhile: what this step wants
      if (!isStripeMissing(err)) throw err;
    }
  }
  // Ids only: the subscription id leads to the buyer for whoever may see them.
  deps.logger.warn('subscription canceled: the bank took back one of its payments (chargeback)', {
    stripeSubscriptionId,
    disputeId: dispute.id,
    reason: dispute.reason,
    eventId: ref.id,
  });
  try {
    return (await syncStripeSubscription(deps, stripeSubscriptionId, ref)).outcome;
  } catch (err) {
    if (!isStripeMissing(err)) throw err;
    return (await applyStripeState(deps, { event: ref })).outcome;
  }
}

/** The Stripe subscription a disputed payment paid for, if it paid for one. */
async function disputedSubscription(deps: BillingDeps, dispute: Stripe.Dispute): Promise<string | undefined> {
  const paymentIntent = idOf(dispute.payment_intent);
  if (!paymentIntent) return undefined;
  const { stripe } = requirePayments(deps);
  const payments = await callStripe(() =>
    stripe.invoicePayments.list({ payment: { type: 'payment_intent', payment_intent: paymentIntent }, limit: 1 }),
  );
  const invoiceId = idOf(payments.data[0]?.invoice as string | { id: string } | undefined);
  if (!invoiceId) return undefined;
  try {
    const invoice = await callStripe(() => stripe.invoices.retrieve(invoiceId));
    return idOf(invoice.parent?.subscription_details?.subscription as string | { id: string } | null | undefined) ?? undefined;
  } catch (err) {
    if (isStripeMissing(err)) return undefined;
    throw err;
  }
}

async function knownHere(deps: BillingDeps, stripeSubscriptionId: string, priceId: string | undefined): Promise<boolean> {
  const row = await first<{ known: boolean }>(
    deps.database.db,
    sql`select exists (select 1 from public.subscriptions where stripe_subscription_id = ${stripeSubscriptionId})
            or exists (select 1 from public.purchase_claims where stripe_subscription_id = ${stripeSubscriptionId})
            or exists (select 1 from public.tiers where stripe_price_id = ${priceId ?? null}) as known`,
  );
  return row?.known ?? false;
}
