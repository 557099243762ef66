import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signUp } from '../support/users.ts';
import { activeAgent, buyPaidTier, deliverPending, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * An admin downgrade of a subscription the user has already canceled at period end. The service creates a
 * schedule from the subscription and then rewrites it with `end_behavior: 'release'` and a renewing phase on the new
 * price. At Stripe, a schedule made from a subscription set to cancel at period end carries that cancellation
 * (end_behavior `cancel`; release's `preserve_cancel_date` exists for it), so the rewrite turns the user's
 * cancellation into a renewal at the new price: the user is charged for a period they canceled.
 * Now the change is refused (422 INVALID_STATE), as the portal's cancel flow is for an ending subscription,
 * and nothing that renews is sent to Stripe (found by review 50).
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

/** A user on Pro (3000) of an agent that also sells Basic (1000). */
async function proSubscriber() {
  const agent = await activeAgent(w);
  const basic = await paidTier(w, agent.id, { name: 'Basic', priceCents: 1000 });
  const pro = await paidTier(w, agent.id, { name: 'Pro', priceCents: 3000 });
  const user = await signUp(w.t);
  return { agent, basic, user, bought: await buyPaidTier(w, user, pro.id) };
}

/** The admin's change to `tierId`, and the requests to Stripe's schedule endpoints it made. */
async function changeTier(subscriptionId: string, tierId: string) {
  const before = w.fake.requests.length;
  const res = await w.t.http.post(`/admin/subscriptions/${subscriptionId}/change-tier`, { cookie: w.admin.cookie, json: { tierId } });
  const schedules = w.fake.requests
    .slice(before)
    .filter((r) => r.method === 'POST' && /^\/v1\/subscription_schedules(\/[^/]+)?$/.test(r.path))
    .map((r) => ({ path: r.path, end_behavior: r.body.end_behavior, phases: (r.body.phases ?? []).length }));
  return { res, schedules };
}

describe('an admin tier change of a subscription ending at period end (review 50)', () => {
  it('is refused, and Stripe is never asked to renew it on the cheaper price', async () => {
    const { agent, basic, user, bought } = await proSubscriber();
    // The user cancels: access to the end of the paid period, then nothing more is charged.
    const cancel = await w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: user.cookie });
    expect(cancel.status).toBe(200);
    expect(cancel.body.data).toMatchObject({ cancelAtPeriodEnd: true });
    await deliverPending(w);

    const { res, schedules } = await changeTier(bought.subscriptionId, basic.id);
    // What the service asked of Stripe for a subscription the user canceled: keep it going after the period, on Basic.
    expect(schedules).toEqual([]);
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe('INVALID_STATE');
  });

  it('is refused when the user canceled in the portal and the webhook is still on its way (review 52)', async () => {
    const { basic, bought } = await proSubscriber();
    // The cancel is at Stripe only: the row says nothing of it until the event is delivered.
    const canceled = await w.fake.client().subscriptions.update(bought.stripeSubscriptionId, { cancel_at_period_end: true });
    expect(canceled.cancel_at_period_end).toBe(true);

    const { res, schedules } = await changeTier(bought.subscriptionId, basic.id);
    expect(schedules).toEqual([]);
    expect(res.status, res.text).toBe(422);
    expect(res.body.error.code).toBe('INVALID_STATE');
  });
});
