import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signUp } from '../support/users.ts';
import { first, sql } from '../../functions/platform/db.ts';
import { activeAgent, buyPaidTier, deliverPending, openPaidCheckout, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A verified user who already pays for one agent (so has a Stripe customer) buys another agent signed out, typing
 * their own address on Stripe's page: the purchase attaches to their account under the second customer Checkout
 * made, which the account's `overview` portal does not open. Once that subscription's retries ran out (`incomplete`,
 * no access), the user could neither cancel it (404), nor open its cancel flow (404), nor buy the agent again (422):
 * Stripe went on invoicing it with no way out (found by review 45). The user's own cancel now ends it at once.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w?.close());

async function anonymousPurchaseOfAPayingUser() {
  const user = await signUp(w.t, { verified: true });
  const first = await activeAgent(w);
  await buyPaidTier(w, user, (await paidTier(w, first.id, { priceCents: 1000 })).id);

  const agent = await activeAgent(w);
  const tier = await paidTier(w, agent.id, { priceCents: 2000 });
  const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
  expect(start.status).toBe(200);
  const stripeSub = w.fake.completeCheckout(start.body.data.sessionId, { email: user.email });
  await deliverPending(w);
  expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).status).toBe(200);
  return { user, agent, tier, stripeSub };
}

/** The next renewal fails and Stripe's retries run out: the subscription is `incomplete` here (no access). */
async function retriesRunOut(stripeSubscriptionId: string) {
  w.fake.setPaymentMode('fails');
  w.fake.advancePeriod(stripeSubscriptionId);
  w.fake.retriesExhausted(stripeSubscriptionId);
  await deliverPending(w);
  w.fake.setPaymentMode('succeeds');
}

describe('a paid subscription that grants nothing', () => {
  it('is ended now by its user, at Stripe too, and the agent can be bought again', async () => {
    const { user, agent, tier, stripeSub } = await anonymousPurchaseOfAPayingUser();
    await retriesRunOut(stripeSub.id);
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).status).toBe(404);

    const cancel = await w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: user.cookie });
    expect(cancel.status, cancel.text).toBe(200);
    expect(cancel.body.data.status).toBe('canceled');
    expect(w.fake.subscriptions.get(stripeSub.id)!.status).toBe('canceled');

    const again = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
    expect(again.status, again.text).toBe(200);
    // and a second cancel finds nothing to cancel
    expect((await w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: user.cookie })).status).toBe(404);
  });

  it('judged by Stripe, not by the row: one whose payment Stripe took, its events still on their way, ends at period end', async () => {
    // Review 65: the cancel judged the row, still `incomplete`, and ended at once, with nothing refunded, the period
    // the user had just paid for (a bank debit clearing, 3-D Secure answered). contract.md: paid, at period end.
    const { agent, user, sessionId } = await openPaidCheckout(w, { priceCents: 9900 });
    const sub = w.fake.completeCheckout(sessionId, { payment: 'pending' });
    await deliverPending(w);
    const row = () => first<{ status: string }>(w.t.db, sql`select status from subscriptions where stripe_subscription_id = ${sub.id}`);
    expect(await row()).toEqual({ status: 'incomplete' });

    w.fake.payInvoice(sub.latest_invoice);
    expect(w.fake.takeEvents().length).toBeGreaterThan(0);
    expect(w.fake.subscriptions.get(sub.id)!.status).toBe('active');

    const res = await w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: user.cookie });
    expect(res.status, res.text).toBe(200);
    expect(res.body.data).toMatchObject({ status: 'active', cancelAtPeriodEnd: true });
    expect(w.fake.subscriptions.get(sub.id)).toMatchObject({ status: 'active', cancel_at_period_end: true });
    expect([...w.fake.refunds.values()].filter((r) => r.metadata?.stripeSubscriptionId === sub.id)).toEqual([]);
  });

  it('of another user stays out of reach: 404, and nothing changes at Stripe', async () => {
    const { agent, stripeSub } = await anonymousPurchaseOfAPayingUser();
    await retriesRunOut(stripeSub.id);
    const stranger = await signUp(w.t, { verified: true });
    const res = await w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: stranger.cookie });
    expect(res.status).toBe(404);
    expect(w.fake.subscriptions.get(stripeSub.id)!.status).not.toBe('canceled');
  });
});
