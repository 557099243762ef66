import type Stripe from 'stripe';
import type { BillingDeps } from './billing-deps.ts';
import { ApiError } from '../http/errors.ts';
import { isStripeMissing, requirePayments } from './payments.ts';
import { applyStripeState, eventSeen, syncStripeSubscription, type ApplyOutcome } from './subscription-state.ts';
import { endDisputedSubscription } from './disputes.ts';
import { forgetDeletedCustomer } from './customers.ts';

/**
 * POST /webhooks/stripe. Events are notifications, not state: after the signature check, the event's
 * subscription is re-read from Stripe and its whole state written in one transaction that also records the
 * event id (billing_apply_stripe_subscription). Consequences:
 *   * a duplicate delivery answers 200 and changes nothing (the id is already recorded);
 *   * delivery order does not matter (every event writes Stripe's current state, not the event's snapshot);
 *   * when anything fails (Stripe unreachable, database down) the event is not recorded and the answer is 5xx,
 *     so Stripe delivers it again.
 */

export const HANDLED_EVENTS = new Set([
  'checkout.session.completed',
  'customer.subscription.created',
  'customer.subscription.updated',
  'customer.subscription.deleted',
  'customer.subscription.pending_update_applied',
  'customer.subscription.pending_update_expired',
  // Stripe pauses a subscription (a trial ended without a payment method, or its pause endpoint and portal in flexible
  // billing mode) and sends these, perhaps alone: a paused one grants nothing until it is resumed (review 79)
  'customer.subscription.paused',
  'customer.subscription.resumed',
  'invoice.paid',
  'invoice.payment_succeeded',
  'invoice.payment_failed',
  'invoice.voided',
  'subscription_schedule.updated',
  'subscription_schedule.released',
  'subscription_schedule.completed',
  'subscription_schedule.canceled',
  // a chargeback: the subscription it took money from ends (disputes.ts)
  'charge.dispute.created',
  // the customer deleted at Stripe (its subscriptions end by their own events): nothing names it again (customers.ts)
  'customer.deleted',
]);

export interface WebhookResult {
  received: true;
  eventId: string;
  type: string;
  outcome: ApplyOutcome | 'ignored';
}

export async function verifyStripeEvent(deps: BillingDeps, payload: string, signature: string | undefined): Promise<Stripe.Event> {
  const payments = requirePayments(deps);
  if (!payments.webhookSecret) {
    throw new ApiError('PAYMENTS_NOT_CONFIGURED', 'The Stripe webhook is not configured (STRIPE_WEBHOOK_SECRET)');
  }
  if (!signature) throw badSignature('The Stripe-Signature header is missing');
  let event: Stripe.Event;
  try {
    event = await payments.stripe.webhooks.constructEventAsync(payload, signature, payments.webhookSecret, undefined, payments.cryptoProvider);
  } catch {
    throw badSignature('The Stripe signature does not match this payload');
  }
  // The signature proves who sent the body, not its shape: Stripe always sends these, but a signed body without them
  // (a hand-made test event, another integration's tooling) answered 500 from deep in the handler (found by a review).
  const object = (event as { data?: { object?: unknown } }).data?.object;
  if (typeof event.id !== 'string' || !event.id || typeof event.type !== 'string' || typeof object !== 'object' || object === null) {
    const message = 'A Stripe event has a string id and type and an object at data.object';
    throw new ApiError('VALIDATION_ERROR', message, { issues: [{ path: 'body', message }] });
  }
  return event;
}

function badSignature(message: string) {
  return new ApiError('VALIDATION_ERROR', message, { issues: [{ path: 'stripe-signature', message }] });
}

/** The Stripe subscription an event is about, read off the event (these links never change on an object). */
export function subscriptionIdOf(event: Stripe.Event): string | undefined {
  const object = event.data.object as unknown as Record<string, any>;
  const id = (v: unknown) => (typeof v === 'string' ? v : typeof v === 'object' && v && 'id' in v ? String((v as { id: unknown }).id) : undefined);
  if (event.type.startsWith('customer.subscription.')) return object.id;
  if (event.type === 'checkout.session.completed') return object.mode === 'subscription' ? id(object.subscription) : undefined;
  if (event.type.startsWith('invoice.')) {
    return id(object.parent?.subscription_details?.subscription) ?? id(object.subscription);
  }
  if (event.type.startsWith('subscription_schedule.')) return id(object.subscription) ?? id(object.released_subscription);
  return undefined;
}

export async function handleStripeWebhook(deps: BillingDeps, payload: string, signature: string | undefined): Promise<WebhookResult> {
  const event = await verifyStripeEvent(deps, payload, signature);
  const base = { received: true as const, eventId: event.id, type: event.type };
  if (!HANDLED_EVENTS.has(event.type)) return { ...base, outcome: 'ignored' };
  if (await eventSeen(deps.database.db, event.id)) return { ...base, outcome: 'duplicate' };

  const ref = { id: event.id, type: event.type };
  if (event.type === 'charge.dispute.created') return { ...base, outcome: await endDisputedSubscription(deps, event, ref) };
  if (event.type === 'customer.deleted') {
    // final at Stripe (a deleted customer is never restored), so the event's own object says all: no read needed; a
    // signed body without the customer's id (a hand-made test event) unlinks nothing and is recorded, as any event
    const customerId: unknown = event.data.object.id;
    if (typeof customerId === 'string') await forgetDeletedCustomer(deps, customerId);
    const { outcome } = await applyStripeState(deps, { event: ref });
    return { ...base, outcome };
  }
  const stripeSubscriptionId = subscriptionIdOf(event);
  if (!stripeSubscriptionId) {
    const { outcome } = await applyStripeState(deps, { event: ref });
    return { ...base, outcome };
  }
  try {
    const { outcome } = await syncStripeSubscription(deps, stripeSubscriptionId, ref);
    return { ...base, outcome };
  } catch (err) {
    // An object Stripe no longer knows (another account, test data deleted): nothing to apply, ever.
    if (isStripeMissing(err)) {
      deps.logger.warn('stripe webhook about an unknown subscription', { eventId: event.id, stripeSubscriptionId });
      const { outcome } = await applyStripeState(deps, { event: ref });
      return { ...base, outcome };
    }
    throw err;
  }
}
