import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { signUp, type TestUser } from '../support/users.ts';
import type { FakeEvent } from '../stripe-fake/server.ts';
import { activeAgent, deliver, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A second paid subscription to an agent the user already pays for (functions/billing/duplicate-purchases.ts).
 * Checkout refuses a second purchase only when the first is already recorded: two checkouts opened before either was
 * paid were both charged, the second answered `conflict` and nothing was done about it, so Stripe went on charging
 * it every period for nothing. Found by a hostile review. Now it is canceled at once and its payment refunded.
 */

let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

/** A user who opened two checkouts of one paid tier (two tabs), neither paid yet. */
async function twoCheckouts() {
  const agent = await activeAgent(w);
  const tier = await paidTier(w, agent.id, { priceCents: 2500 });
  const user = await signUp(w.t);
  const open = async () => {
    const res = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
    expect(res.status).toBe(200);
    return res.body.data.sessionId as string;
  };
  const [first, second] = [await open(), await open()];
  return { agent, tier, user, first, second };
}

/** Two checkouts, both paid. */
async function paidTwice() {
  const { agent, tier, user, first, second } = await twoCheckouts();
  const kept = w.fake.completeCheckout(first).id as string;
  const keptEvents = w.fake.takeEvents();
  const duplicate = w.fake.completeCheckout(second).id as string;
  return { agent, tier, user, kept, keptEvents, duplicate, duplicateEvents: w.fake.takeEvents() };
}

const liveRows = (user: TestUser) =>
  rows<{ stripeSubscriptionId: string }>(
    w.t.db,
    sql`select stripe_subscription_id as "stripeSubscriptionId" from subscriptions where user_id = ${user.userId} and status <> 'canceled'`,
  );
const refundsOf = (stripeSubscriptionId: string) => {
  const invoices = [...w.fake.invoices.values()].filter((i) => i.parent?.subscription_details?.subscription === stripeSubscriptionId);
  const intents = invoices.map((i) => w.fake.invoicePayments.get(i.id)?.payment.payment_intent).filter(Boolean);
  return [...w.fake.refunds.values()].filter((r) => intents.includes(r.payment_intent));
};

describe('a second paid subscription to the same agent', () => {
  it('attack: two checkouts paid before either was recorded: the second is canceled at Stripe and refunded in full', async () => {
    const { user, tier, kept, keptEvents, duplicate, duplicateEvents } = await paidTwice();
    await deliver(w, keptEvents);
    await deliver(w, duplicateEvents);

    expect(await liveRows(user)).toEqual([{ stripeSubscriptionId: kept }]);
    expect(w.fake.subscriptions.get(duplicate)!.status).toBe('canceled');
    expect(w.fake.subscriptions.get(kept)!.status).toBe('active');
    expect(refundsOf(duplicate).map((r) => ({ amount: r.amount, reason: r.reason }))).toEqual([{ amount: tier.priceCents, reason: 'duplicate' }]);
    expect(refundsOf(kept)).toEqual([]);
    expect(w.t.logs.some((l) => l.msg === 'duplicate paid subscription canceled and refunded' && l.stripeSubscriptionId === duplicate)).toBe(true);

    // Stripe's events about the cancellation it was asked for change nothing for the user.
    await deliver(w, w.fake.takeEvents());
    expect(await liveRows(user)).toEqual([{ stripeSubscriptionId: kept }]);
    // and Stripe's redelivery of the same events refunds nothing twice
    await deliver(w, duplicateEvents.map((event) => ({ ...event, id: `${event.id}_again` })));
    expect(refundsOf(duplicate)).toHaveLength(1);
  });

  it('when Stripe fails midway, the event is not recorded: its redelivery finishes the undo, refunding once', async () => {
    const { user, kept, keptEvents, duplicate, duplicateEvents } = await paidTwice();
    await deliver(w, keptEvents);
    const created = duplicateEvents.find((e) => e.type === 'customer.subscription.created')!;
    // the refund goes through, the cancel does not
    w.fake.outage(`DELETE /v1/subscriptions/${duplicate}`);
    try {
      const failed = await w.fake.deliver(w.webhookUrl, created);
      expect(failed.status).toBeGreaterThanOrEqual(500);
    } finally {
      w.fake.recover();
    }
    expect(w.fake.subscriptions.get(duplicate)!.status).toBe('active');
    expect(refundsOf(duplicate)).toHaveLength(1);

    const redelivered = await w.fake.deliver(w.webhookUrl, created);
    expect(redelivered.status).toBe(200);
    expect(w.fake.subscriptions.get(duplicate)!.status).toBe('canceled');
    expect(refundsOf(duplicate)).toHaveLength(1);
    expect(await liveRows(user)).toEqual([{ stripeSubscriptionId: kept }]);
  });

  it('when Stripe cannot find what it is asked to refund, the event answers 5xx and is not recorded (not "unknown subscription")', async () => {
    const { kept, keptEvents, duplicate, duplicateEvents } = await paidTwice();
    await deliver(w, keptEvents);
    const created = duplicateEvents.find((e) => e.type === 'customer.subscription.created')!;
    w.fake.outage('POST /v1/refunds', { status: 404, type: 'invalid_request_error', code: 'resource_missing' });
    try {
      expect((await w.fake.deliver(w.webhookUrl, created)).status).toBeGreaterThanOrEqual(500);
    } finally {
      w.fake.recover();
    }
    expect(await rows(w.t.db, sql`select id from stripe_events where id = ${created.id}`)).toEqual([]);
    expect((await w.fake.deliver(w.webhookUrl, created)).status).toBe(200);
    expect(refundsOf(duplicate)).toHaveLength(1);
    expect(w.fake.subscriptions.get(kept)!.status).toBe('active');
  });

  it('is no duplicate when the one the user had has in fact ended at Stripe: it is written as the live one', async () => {
    const { user, kept, keptEvents, duplicate, duplicateEvents } = await paidTwice();
    await deliver(w, keptEvents);
    // The first ends at Stripe (an immediate cancel in the Dashboard); its events have not arrived yet.
    await fetch(`${w.fake.url}/v1/subscriptions/${kept}`, { method: 'DELETE', headers: { authorization: `Bearer ${w.fake.secretKey}` } });
    const late: FakeEvent[] = w.fake.takeEvents();
    await deliver(w, duplicateEvents);
    expect(await liveRows(user)).toEqual([{ stripeSubscriptionId: duplicate }]);
    expect(w.fake.subscriptions.get(duplicate)!.status).toBe('active');
    expect(refundsOf(duplicate)).toEqual([]);
    await deliver(w, late);
    expect(await liveRows(user)).toEqual([{ stripeSubscriptionId: duplicate }]);
  });

  it('keeps the paid one when the one recorded first is not paid yet: the unpaid one is ended, nothing refunded', async () => {
    // Found by a review: a bank debit still pending (incomplete) was kept and the card payment refunded.
    const { agent, user, first, second } = await twoCheckouts();
    const unpaid = w.fake.completeCheckout(first, { payment: 'pending' }).id as string;
    await deliver(w, w.fake.takeEvents());
    const paid = w.fake.completeCheckout(second).id as string;
    await deliver(w, w.fake.takeEvents());
    await deliver(w, w.fake.takeEvents()); // the events of the cancellation it asked for
    expect(await liveRows(user)).toEqual([{ stripeSubscriptionId: paid }]);
    expect(w.fake.subscriptions.get(unpaid)!.status).toBe('canceled');
    expect(w.fake.subscriptions.get(paid)!.status).toBe('active');
    expect([...refundsOf(paid), ...refundsOf(unpaid)]).toEqual([]);
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).body.data).toMatchObject({ status: 'active' });
  });

  it('keeps the paid one when the unpaid one recorded first is unknown to Stripe (it was dropped for good)', async () => {
    const { user, first, second } = await twoCheckouts();
    const unpaid = w.fake.completeCheckout(first, { payment: 'pending' }).id as string;
    await deliver(w, w.fake.takeEvents());
    w.fake.subscriptions.delete(unpaid); // another Stripe account, deleted test data
    const paid = w.fake.completeCheckout(second).id as string;
    await deliver(w, w.fake.takeEvents());
    expect(await liveRows(user)).toEqual([{ stripeSubscriptionId: paid }]);
    expect(refundsOf(paid)).toEqual([]);
  });
});

