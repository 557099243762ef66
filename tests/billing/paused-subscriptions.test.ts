import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signUp } from '../support/users.ts';
import { activeAgent, buyPaidTier, deliverPending, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A subscription Stripe pauses (a trial ended without a payment method; in flexible billing mode also its pause
 * endpoint and the portal's pause) is invoiced for nothing while paused, so it grants nothing. Stripe announces it with
 * `customer.subscription.paused` and `customer.subscription.resumed`, which the webhook ignored: if Stripe sent no
 * `customer.subscription.updated` beside them, a paused subscription kept its access for free (review 79). The fake
 * sends those two events alone.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

describe('a subscription Stripe pauses', () => {
  it('grants nothing while paused, and again once resumed', async () => {
    const agent = await activeAgent(w);
    const user = await signUp(w.t);
    const bought = await buyPaidTier(w, user, (await paidTier(w, agent.id)).id);
    const status = async () =>
      (await w.t.http.get('/me/subscriptions', { cookie: user.cookie })).body.data.find((s: { agentId: string }) => s.agentId === agent.id)?.status;
    expect(await status()).toBe('active');

    w.fake.pause(bought.stripeSubscriptionId);
    expect((await deliverPending(w)).map((e) => e.type)).toEqual(['customer.subscription.paused']);
    expect(await status()).toBe('incomplete');
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).status).toBe(404);

    w.fake.resume(bought.stripeSubscriptionId);
    expect((await deliverPending(w)).map((e) => e.type)).toEqual(['customer.subscription.resumed']);
    expect(await status()).toBe('active');
  });
});
