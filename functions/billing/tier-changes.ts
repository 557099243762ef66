import type Stripe from 'stripe';
import type { BillingDeps } from './billing-deps.ts';
import { notFound } from '../http/errors.ts';
import { first, sql } from '../platform/db.ts';
import { callStripe, isStripeRefusal, requirePayments, stripeRefused } from './payments.ts';
import { billingSubscription, type BillingSubscription } from './subscription-queries.ts';
import { readStripeSubscription, syncStripeSubscription } from './subscription-state.ts';
import type { SubscriptionDto } from './subscriptions.ts';
import { ensureTierPrice, findBillingTier, invalidState, isPaid } from './tiers.ts';

/**
 * Admin tier changes of a paid subscription (interface-spec section 3):
 *   * upgrade (new price > current): Stripe updates the subscription with an immediately invoiced proration,
 *     `payment_behavior: pending_if_incomplete`, so the price only changes once that invoice is paid. Until then
 *     Stripe holds a `pending_update`, which we show as the pending tier.
 *   * downgrade (new price <= current): a subscription schedule switches to the new price at the next period.
 * In both cases the local tier flips only when Stripe's subscription carries the new price, written by the
 * same state sync as the webhook; this module never writes a tier itself.
 */

async function subscriptionOr404(deps: BillingDeps, subscriptionId: string): Promise<BillingSubscription> {
  const sub = await billingSubscription(deps, subscriptionId);
  if (!sub) throw notFound('Subscription', { subscriptionId });
  return sub;
}

const endingSubscription = () =>
  invalidState('The subscription ends at the end of its period (its user canceled it): it cannot change tier', { cancelAtPeriodEnd: true });

async function reread(deps: BillingDeps, subscriptionId: string): Promise<SubscriptionDto> {
  return (await billingSubscription(deps, subscriptionId))!.dto;
}

export async function changeSubscriptionTier(deps: BillingDeps, subscriptionId: string, tierId: string): Promise<SubscriptionDto> {
  const sub = await subscriptionOr404(deps, subscriptionId);
  if (sub.status === 'canceled' || sub.status === 'incomplete') {
    throw invalidState(`A ${sub.status} subscription cannot change tier`, { status: sub.status });
  }
  const target = await findBillingTier(deps, tierId);
  if (!target || target.archived) throw notFound('Tier', { tierId });
  if (target.agentId !== sub.agentId) throw invalidState('The tier belongs to another agent', { tierId });
  if (target.id === sub.tierId) throw invalidState('The subscription is already on this tier', { tierId });
  if (sub.pendingChangeKind) {
    throw invalidState('A tier change is already pending: cancel it first', { pendingChangeKind: sub.pendingChangeKind });
  }
  // A paid subscription its user canceled ends with its period. A downgrade is a Stripe schedule whose next phase
  // renews on the new price (end_behavior release): it would turn the cancellation into a renewal the user did not
  // ask for, and an upgrade bills a prorated price for a subscription that is ending (found by review 50). Judged on
  // the row here, and again on Stripe's own state below: a cancel made in the portal is on the row only once its
  // webhook has come (review 52).
  if (sub.stripeSubscriptionId && sub.cancelAtPeriodEnd) throw endingSubscription();
  const current = (await findBillingTier(deps, sub.tierId))!;

  if (!sub.stripeSubscriptionId) {
    if (isPaid(target)) {
      throw invalidState('A free subscription moves to a paid tier through checkout: create a checkout link for the user', {
        tierId,
      });
    }
    // Free to free: nothing to bill, the tier changes now; only while the row is still free and live. A paid
    // checkout's webhook converts the live free row in place, and a free tier written over the row it had just made
    // paid left the user charged the paid price and metered on the free tier's quota (found by a review). The change
    // is then judged again as what the row has become (a paid subscription does not move to a free tier: 422), as
    // cancel() in cancel-subscription.ts does.
    const changed = await first(
      deps.database.db,
      sql`update public.subscriptions set tier_id = ${target.id}, updated_at = ${deps.clock.now()}
           where id = ${sub.id} and stripe_subscription_id is null and status not in ('canceled', 'incomplete')
          returning id`,
    );
    if (!changed) return changeSubscriptionTier(deps, subscriptionId, tierId);
    return reread(deps, sub.id);
  }
  if (!isPaid(target)) {
    throw invalidState('A paid subscription cannot move to a free tier: cancel it at period end, then start the free tier', { tierId });
  }
  if (target.currency !== current.currency) {
    throw invalidState('The new tier is billed in another currency', { currency: target.currency });
  }

  const { stripe } = requirePayments(deps);
  const newPrice = await ensureTierPrice(deps, target);
  const stripeSub = await readStripeSubscription(deps, sub.stripeSubscriptionId);
  if (stripeSub.cancel_at_period_end || stripeSub.cancel_at) throw endingSubscription();
  const item = stripeSub.items.data[0]!;
  try {
    if (target.priceCents > current.priceCents) {
      await callStripe(() =>
        stripe.subscriptions.update(stripeSub.id, {
          items: [{ id: item.id, price: newPrice, quantity: 1 }],
          proration_behavior: 'always_invoice',
          payment_behavior: 'pending_if_incomplete',
        }),
      );
    } else {
      await scheduleDowngrade(stripe, stripeSub, item, newPrice, target.interval);
    }
  } catch (err) {
    if (isStripeRefusal(err)) throw stripeRefused('the change', err);
    throw err;
  }
  await syncStripeSubscription(deps, sub.stripeSubscriptionId);
  return reread(deps, sub.id);
}

/** The current price until the period ends, then the new one; the schedule lets go of the subscription after. */
async function scheduleDowngrade(
  stripe: Stripe,
  sub: Stripe.Subscription,
  item: Stripe.SubscriptionItem,
  newPrice: string,
  interval: 'month' | 'year',
): Promise<void> {
  const existing = typeof sub.schedule === 'string' ? sub.schedule : sub.schedule?.id;
  const schedule = existing
    ? await callStripe(() => stripe.subscriptionSchedules.retrieve(existing))
    : await callStripe(() => stripe.subscriptionSchedules.create({ from_subscription: sub.id }));
  const phase = schedule.phases[0];
  await callStripe(() =>
    stripe.subscriptionSchedules.update(schedule.id, {
      end_behavior: 'release',
      proration_behavior: 'none',
      phases: [
        {
          items: [{ price: item.price.id, quantity: 1 }],
          start_date: phase?.start_date ?? item.current_period_start,
          end_date: item.current_period_end,
        },
        { items: [{ price: newPrice, quantity: 1 }], duration: { interval, interval_count: 1 } },
      ],
    }),
  );
}

export async function cancelPendingTierChange(deps: BillingDeps, subscriptionId: string): Promise<SubscriptionDto> {
  const sub = await subscriptionOr404(deps, subscriptionId);
  if (!sub.pendingChangeKind || !sub.stripeSubscriptionId) {
    throw invalidState('There is no pending tier change on this subscription');
  }
  const { stripe } = requirePayments(deps);
  const stripeSub = await readStripeSubscription(deps, sub.stripeSubscriptionId);
  try {
    if (sub.pendingChangeKind === 'upgrade') {
      const invoiceId =
        sub.pendingInvoiceId ?? (typeof stripeSub.latest_invoice === 'string' ? stripeSub.latest_invoice : stripeSub.latest_invoice?.id);
      // Voiding the open proration invoice discards Stripe's pending update: the price never changes.
      if (invoiceId && stripeSub.pending_update) await callStripe(() => stripe.invoices.voidInvoice(invoiceId));
    } else {
      const scheduleId = sub.stripeScheduleId ?? (typeof stripeSub.schedule === 'string' ? stripeSub.schedule : stripeSub.schedule?.id);
      // Releasing the schedule leaves the subscription on its current price with no future phase.
      if (scheduleId) await callStripe(() => stripe.subscriptionSchedules.release(scheduleId));
    }
  } catch (err) {
    if (!isStripeRefusal(err)) throw err;
    // Stripe moved on (the upgrade was paid, the schedule already ended): show Stripe's state and say so.
    await syncStripeSubscription(deps, sub.stripeSubscriptionId);
    throw invalidState(`The pending change can no longer be canceled: ${(err as Error).message}`);
  }
  await syncStripeSubscription(deps, sub.stripeSubscriptionId);
  return reread(deps, sub.id);
}
