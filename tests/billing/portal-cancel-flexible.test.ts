import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, buyPaidTier, deletedAgentRounds, deliverPending, paidTier, DRAIN_TOKEN, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A cancel made in Stripe's customer portal, as Stripe records it for the marketplace's subscriptions (review 76). The
 * service never sets `billing_mode`, so the subscriptions its Checkout Sessions make are in Stripe's flexible billing
 * mode (the default since API version 2025-09-30), where the portal's "cancel at period end" (the marketplace's own
 * cancel link, POST /me/billing-portal { flow: "cancel" }) is `cancel_at` = the period's end with
 * `cancel_at_period_end` false. Read from `cancel_at_period_end` alone, the subscription showed as renewing, the cancel
 * link answered 200 again, and a deleted agent's round took the user's cancel over as its own: it mailed them, and the
 * agent's restore renewed what they had canceled. The fake's cancelInPortal leaves the state Stripe leaves.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld({ env: { DRAIN_TOKEN } });
});
afterAll(() => w.close());

const { drain, del, restore } = deletedAgentRounds(() => w);

async function subscriber() {
  const agent = await activeAgent(w);
  const user = await signUp(w.t);
  const bought = await buyPaidTier(w, user, (await paidTier(w, agent.id, { priceCents: 1500 })).id);
  return { agent, user, ...bought };
}

describe('a cancel made in the customer portal (cancel_at at the period end)', () => {
  it('shows the subscription as ending, the portal cancel link answers 422 for it, and the period end ends it', async () => {
    const a = await subscriber();
    w.fake.cancelInPortal(a.stripeSubscriptionId);
    await deliverPending(w);

    const mine = await w.t.http.get(`/me/subscriptions/${a.agent.id}`, { cookie: a.user.cookie });
    expect(mine.body.data).toMatchObject({ status: 'active', cancelAtPeriodEnd: true });
    const again = await w.t.http.post('/me/billing-portal', { cookie: a.user.cookie, json: { flow: 'cancel', agentId: a.agent.id } });
    expect([again.status, again.body.error?.code]).toEqual([422, 'INVALID_STATE']);
    // the marketplace's own cancel finds it ending and asks Stripe nothing that would change it
    const cancel = await w.t.http.post(`/me/subscriptions/${a.agent.id}/cancel`, { cookie: a.user.cookie });
    expect(cancel.status).toBe(200);
    expect(w.fake.subscriptions.get(a.stripeSubscriptionId)!).toMatchObject({ cancel_at_period_end: false, status: 'active' });
    expect(w.fake.subscriptions.get(a.stripeSubscriptionId)!.cancel_at).not.toBeNull();

    w.fake.advancePeriod(a.stripeSubscriptionId);
    await deliverPending(w);
    expect((await w.t.http.get(`/me/subscriptions/${a.agent.id}`, { cookie: a.user.cookie })).status).toBe(404);
  });

  it("attack on the buyer: a deleted agent's round leaves the user's portal cancel theirs, so the restore renews nothing", async () => {
    for (const eventFirst of [true, false]) {
      const a = await subscriber();
      w.fake.cancelInPortal(a.stripeSubscriptionId);
      // the round may run before Stripe's event has reached the service: it judges Stripe's state, not the row
      if (eventFirst) await deliverPending(w);
      await del(a.agent.id);
      await drain();
      await deliverPending(w);
      const removed = (await mailsTo(w.t, a.user.email)).filter((m) => m.subject.includes('was removed from Agent Marketplace'));
      expect({ eventFirst, mails: removed.length }).toEqual({ eventFirst, mails: 0 });

      await restore(a.agent.id);
      await drain();
      await deliverPending(w);
      const atStripe = w.fake.subscriptions.get(a.stripeSubscriptionId)!;
      expect({ eventFirst, ends: atStripe.cancel_at_period_end || atStripe.cancel_at !== null }).toEqual({ eventFirst, ends: true });
      expect((await mailsTo(w.t, a.user.email)).filter((m) => m.subject.includes('is back on Agent Marketplace'))).toEqual([]);
    }
  });
});
