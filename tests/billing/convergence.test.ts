import fc from 'fast-check';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { CONTRACT_STRIPE_EVENTS } from '../support/contract.ts';
import { insertAgent } from '../support/fixtures.ts';
import { signUp, type TestUser } from '../support/users.ts';
import type { FakeEvent, PaymentMode } from '../stripe-fake/server.ts';
import { deliver, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * The webhook's convergence property: whatever happens to a subscription at Stripe, delivering every resulting
 * event three times in a random order leaves the same local state as delivering each once in order, and that
 * state is Stripe's. 100 random histories (checkout, then upgrades paid, pending or voided, downgrades scheduled
 * or released, period turns with paid or failed renewals, cancellations) made directly at the Stripe fake, as
 * the Dashboard or the customer portal would, so the events are the app's only source.
 */
let w: BillingWorld;
/** Buyers taken in turn: one buyer's checkouts are limited per day (functions/billing/allowances.ts), 100 runs are not. */
let buyers: TestUser[];
let runs = 0;
let stripe: Stripe;
let tiers: Array<{ id: string; stripePriceId: string }>;
beforeAll(async () => {
  w = await startBillingWorld();
  buyers = [await signUp(w.t), await signUp(w.t), await signUp(w.t)];
  stripe = w.fake.client();
  const agent = await insertAgent(w.t.db, { status: 'active' });
  tiers = [
    await paidTier(w, agent.id, { name: 'Basic', priceCents: 1000 }),
    await paidTier(w, agent.id, { name: 'Pro', priceCents: 3000 }),
    await paidTier(w, agent.id, { name: 'Team', priceCents: 5000 }),
  ];
});
afterAll(() => w.close());

type Action =
  | { kind: 'upgrade'; to: 1 | 2; mode: PaymentMode }
  | { kind: 'payOpenInvoice' }
  | { kind: 'voidOpenInvoice' }
  | { kind: 'downgrade'; to: 0 | 1 }
  | { kind: 'releaseSchedule' }
  | { kind: 'advancePeriod'; mode: PaymentMode }
  | { kind: 'cancelAtPeriodEnd'; value: boolean }
  | { kind: 'cancelNow' };

const action: fc.Arbitrary<Action> = fc.oneof(
  fc.record({ kind: fc.constant('upgrade' as const), to: fc.constantFrom(1 as const, 2 as const), mode: fc.constantFrom<PaymentMode>('succeeds', 'requires_action') }),
  fc.constant({ kind: 'payOpenInvoice' as const }),
  fc.constant({ kind: 'voidOpenInvoice' as const }),
  fc.record({ kind: fc.constant('downgrade' as const), to: fc.constantFrom(0 as const, 1 as const) }),
  fc.constant({ kind: 'releaseSchedule' as const }),
  fc.record({ kind: fc.constant('advancePeriod' as const), mode: fc.constantFrom<PaymentMode>('succeeds', 'fails') }),
  fc.record({ kind: fc.constant('cancelAtPeriodEnd' as const), value: fc.boolean() }),
  fc.constant({ kind: 'cancelNow' as const }),
);

/** Applies one action at Stripe; actions Stripe refuses in the current state are simply refused, as there. */
async function perform(subId: string, a: Action, prices: string[]): Promise<void> {
  const sub = w.fake.subscriptions.get(subId)!;
  const openInvoice = sub.latest_invoice && w.fake.invoices.get(sub.latest_invoice)?.status === 'open' ? sub.latest_invoice : undefined;
  try {
    switch (a.kind) {
      case 'upgrade':
        w.fake.setPaymentMode(a.mode);
        await stripe.subscriptions.update(subId, {
          items: [{ id: sub.items.data[0].id, price: prices[a.to]! }],
          proration_behavior: 'always_invoice',
          payment_behavior: 'pending_if_incomplete',
        });
        break;
      case 'payOpenInvoice':
        if (openInvoice && sub.status !== 'canceled') w.fake.payInvoice(openInvoice);
        break;
      case 'voidOpenInvoice':
        if (openInvoice) await stripe.invoices.voidInvoice(openInvoice);
        break;
      case 'downgrade': {
        const schedule = sub.schedule ? await stripe.subscriptionSchedules.retrieve(sub.schedule) : await stripe.subscriptionSchedules.create({ from_subscription: subId });
        const item = sub.items.data[0];
        await stripe.subscriptionSchedules.update(schedule.id, {
          end_behavior: 'release',
          phases: [
            { items: [{ price: item.price.id, quantity: 1 }], start_date: schedule.phases[0]!.start_date, end_date: item.current_period_end },
            { items: [{ price: prices[a.to]!, quantity: 1 }], duration: { interval: 'month', interval_count: 1 } },
          ],
        });
        break;
      }
      case 'releaseSchedule':
        if (sub.schedule) await stripe.subscriptionSchedules.release(sub.schedule);
        break;
      case 'advancePeriod':
        if (sub.status !== 'canceled') {
          w.fake.setPaymentMode(a.mode);
          w.fake.advancePeriod(subId);
        }
        break;
      case 'cancelAtPeriodEnd':
        await stripe.subscriptions.update(subId, { cancel_at_period_end: a.value });
        break;
      case 'cancelNow':
        await stripe.subscriptions.cancel(subId);
        break;
    }
  } catch (err) {
    if (!(err instanceof Stripe.errors.StripeInvalidRequestError)) throw err;
  } finally {
    w.fake.setPaymentMode('succeeds');
  }
}

async function localState(stripeSubscriptionId: string) {
  return first(
    w.t.db,
    sql`select user_id, agent_id, tier_id, status, current_period_start, current_period_end, cancel_at_period_end,
               canceled_at, pending_tier_id, pending_change_kind, pending_invoice_id, stripe_schedule_id, stripe_customer_id
          from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`,
  );
}

/** Forgets what the webhook wrote for this subscription, so the same events can be delivered afresh. */
async function forget(stripeSubscriptionId: string, events: FakeEvent[]) {
  await sql`delete from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`.execute(w.t.db);
  for (const e of events) await sql`delete from stripe_events where id = ${e.id}`.execute(w.t.db);
}

describe('webhook convergence', () => {
  it('delivering each event three times in any order equals one ordered delivery, and matches Stripe', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 5 }), fc.infiniteStream(fc.double({ min: 0, max: 1, noNaN: true })), async (actions, keys) => {
        const prices = tiers.map((t) => t.stripePriceId);
        const buyer = buyers[runs++ % buyers.length]!;
        const checkout = await w.t.http.post('/me/checkout', { cookie: buyer.cookie, json: { tierId: tiers[1]!.id } });
        w.fake.takeEvents();
        const sub = w.fake.completeCheckout(checkout.body.data.sessionId);
        for (const a of actions) await perform(sub.id, a, prices);
        // Stripe sends an endpoint only the event types it subscribes to: the ones the contract lists (taken from
        // contract.md, not from the code's own list, so a type the code forgot to handle shows here).
        const subscribed = new Set<string>(CONTRACT_STRIPE_EVENTS);
        const events = w.fake.takeEvents().filter((e) => subscribed.has(e.type));

        // Three copies of every event, in a random order.
        const copies = [...events, ...events, ...events].map((e) => ({ e, k: keys.next().value as number }));
        copies.sort((x, y) => x.k - y.k);
        await deliver(w, copies.map((c) => c.e));
        const shuffled = await localState(sub.id);

        await forget(sub.id, events);
        await deliver(w, events);
        const ordered = await localState(sub.id);
        expect(shuffled).toEqual(ordered);

        // And it is Stripe's state: the tier of the current price, the status, the period.
        const now = w.fake.subscriptions.get(sub.id)!;
        const item = now.items.data[0];
        const tierOfPrice = tiers[prices.indexOf(item.price.id)]!.id;
        expect(ordered).toMatchObject({
          tier_id: tierOfPrice,
          current_period_start: new Date(item.current_period_start * 1000),
          current_period_end: new Date(item.current_period_end * 1000),
          cancel_at_period_end: now.status !== 'canceled' && now.cancel_at_period_end,
        });
        // past_due into a later period with an earlier renewal still open grants nothing (rule 15): incomplete
        const renewalLeftOpen = [...w.fake.invoices.values()].some(
          (i) =>
            i.parent?.subscription_details?.subscription === sub.id &&
            i.status === 'open' &&
            i.billing_reason === 'subscription_cycle' &&
            i.created < item.current_period_start - 24 * 60 * 60,
        );
        const expectedStatus =
          now.status === 'past_due' && renewalLeftOpen ? 'incomplete' : { active: 'active', past_due: 'past_due', canceled: 'canceled' }[now.status as string];
        expect((ordered as { status: string }).status).toBe(expectedStatus);

        // The next history starts from no subscription (one live subscription per user and agent).
        await forget(sub.id, []);
      }),
      // 50 random histories on each database: 100 a run of the suite, each run new ones (fast-check's random seed).
      { numRuns: 50 },
    );
  }, 600_000);
});
