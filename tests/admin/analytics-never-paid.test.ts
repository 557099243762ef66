import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { activeAgent, buyPaidTier, deliverPending, paidTier, startBillingWorld, type BillingWorld } from '../billing/support.ts';

/**
 * Analytics count what was bought (migration 20261127000300, found by a review of the admin room): a checkout whose
 * first payment never comes is `incomplete` for 23 hours, then Stripe ends it and the marketplace records it
 * `canceled`; from then on it counted as a purchase, a new subscription and a cancellation, so any user could add
 * purchases and churn to any agent's numbers by leaving checkouts unpaid.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld({ now: '2026-03-10T12:00:00.000Z' });
  w.fake.setNow('2026-03-10T12:00:00.000Z');
});
afterAll(() => w.close());

const window = (agentId: string) => `/admin/analytics?from=2026-03-01&to=2026-03-31&agentId=${agentId}`;
async function numbers(agentId: string) {
  const res = await w.t.http.get(window(agentId), { cookie: w.admin.cookie });
  expect(res.status, res.text).toBe(200);
  const { funnel, trends } = res.body.data as { funnel: { purchased: number }; trends: Array<{ newSubscriptions: number; cancellations: number; active: number }> };
  return {
    purchased: funnel.purchased,
    newSubscriptions: trends.reduce((n, r) => n + r.newSubscriptions, 0),
    cancellations: trends.reduce((n, r) => n + r.cancellations, 0),
  };
}

async function abandonedCheckout(user: TestUser, tierId: string): Promise<string> {
  const checkout = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId } });
  expect(checkout.status, checkout.text).toBe(200);
  // 3-D Secure left unanswered: Stripe makes the subscription, incomplete, and waits for the first payment.
  return w.fake.completeCheckout(checkout.body.data.sessionId, { payment: 'pending' }).id as string;
}

describe('analytics and never-paid subscriptions', () => {
  it('attack: a checkout never paid is not a purchase, neither while it waits nor after Stripe ends it', async () => {
    const agent = await activeAgent(w);
    const pro = await paidTier(w, agent.id, { priceCents: 5000 });
    // One real purchase, so the agent is in the numbers at all.
    await buyPaidTier(w, await signUp(w.t), pro.id);
    expect(await numbers(agent.id)).toEqual({ purchased: 1, newSubscriptions: 1, cancellations: 0 });

    const user = await signUp(w.t);
    const stripeSub = await abandonedCheckout(user, pro.id);
    await deliverPending(w);
    expect((await first<{ status: string }>(w.t.db, sql`select status from subscriptions where stripe_subscription_id = ${stripeSub}`))!.status).toBe('incomplete');
    expect(await numbers(agent.id)).toEqual({ purchased: 1, newSubscriptions: 1, cancellations: 0 });

    // 23 hours later Stripe ends it; nothing was ever paid.
    w.fake.expireIncomplete(stripeSub);
    await deliverPending(w);
    expect((await first<{ status: string }>(w.t.db, sql`select status from subscriptions where stripe_subscription_id = ${stripeSub}`))!.status).toBe('canceled');
    expect(await numbers(agent.id)).toEqual({ purchased: 1, newSubscriptions: 1, cancellations: 0 });
  });
});
