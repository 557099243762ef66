import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { insertTier } from '../support/fixtures.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { agentToken, meter, reqId, setQuota } from '../metering/support.ts';
import { activeAgent, deliverPending, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A paid checkout whose first payment is not made yet (Stripe: incomplete; 3-D Secure left unanswered, a bank debit
 * under way), and one that is never paid (incomplete_expired after 23 hours). Migration 20261126000500: neither may
 * reset what the user used. Before, the webhook converted the user's live free subscription in place into the unpaid
 * one, so when it expired a free tier started afresh (new cycle, "the user paid for that usage"); and a never-paid
 * subscription, or one first seen already ended (recorded then as a canceled row created that moment), became the
 * "earlier subscription" a new one continues, so fixed counters began again at 0. Found by a hostile review.
 */

let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld({ now: '2026-03-10T12:00:00.000Z' });
  w.fake.setNow('2026-03-10T12:00:00.000Z');
});
afterAll(() => w.close());

/** An agent with a free tier (5 calls a month, 2 sites for good) and a paid one, and a user who used the free one up. */
async function usedUpFreeTier() {
  const agent = await activeAgent(w);
  const free = await insertTier(w.t.db, agent.id, { name: 'Free' });
  const pro = await paidTier(w, agent.id, { name: 'Pro', priceCents: 5000 });
  const metric = async (slug: string, kind: 'rolling' | 'fixed') =>
    (await first<{ id: string }>(
      w.t.db,
      sql`insert into metric_definitions (agent_id, slug, name, kind) values (${agent.id}, ${slug}, ${slug}, ${kind}) returning id`,
    ))!.id;
  const calls = await metric('calls', 'rolling');
  const sites = await metric('sites', 'fixed');
  await setQuota(w.t.db, free.id, calls, 5);
  await setQuota(w.t.db, free.id, sites, 2);
  await setQuota(w.t.db, pro.id, calls, 1000);
  await setQuota(w.t.db, pro.id, sites, 100);
  const user = await signUp(w.t);
  const started = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: free.id } });
  expect(started.status).toBe(201);
  const use = (slug: string, amount = 1) => meter(w.t, user, agent.id, slug, 'increment', { clientReqId: reqId(), amount });
  expect((await use('calls', 5)).status).toBe(200);
  expect((await use('sites', 2)).status).toBe(200);
  return { agent, free, pro, user, use, freeSubscription: started.body.data.subscription };
}

async function checkoutPending(user: TestUser, tierId: string): Promise<string> {
  const checkout = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId } });
  expect(checkout.status).toBe(200);
  return w.fake.completeCheckout(checkout.body.data.sessionId, { payment: 'pending' }).id as string;
}

const mySubscription = async (user: TestUser, agentId: string) => w.t.http.get(`/me/subscriptions/${agentId}`, { cookie: user.cookie });
const rowOf = (stripeSubscriptionId: string) =>
  first<{ id: string; status: string }>(w.t.db, sql`select id, status from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`);

describe('a paid checkout waiting for its payment', () => {
  it('leaves the free subscription usable as it was, and becomes the paid one once paid', async () => {
    const { agent, pro, user, use, freeSubscription } = await usedUpFreeTier();
    const stripeSub = await checkoutPending(user, pro.id);
    await deliverPending(w);
    const waiting = await mySubscription(user, agent.id);
    expect(waiting.status).toBe(200);
    expect(waiting.body.data).toMatchObject({ id: freeSubscription.id, tierId: freeSubscription.tierId, status: 'active' });
    expect(await rowOf(stripeSub)).toBeUndefined();
    expect((await use('calls')).status).toBe(429);

    w.fake.payInvoice(w.fake.subscriptions.get(stripeSub)!.latest_invoice);
    await deliverPending(w);
    const paid = await mySubscription(user, agent.id);
    // free to paid in place, as a paid checkout always did: the same row, the paid tier, its usage kept
    expect(paid.body.data).toMatchObject({ id: freeSubscription.id, tierId: pro.id, status: 'active' });
    expect((await use('calls')).status).toBe(200);
    expect((await use('sites')).status).toBe(200);
  });

  it('attack: abandoning it does not give the free tier back afresh', async () => {
    const { agent, free, pro, user, use, freeSubscription } = await usedUpFreeTier();
    const stripeSub = await checkoutPending(user, pro.id);
    await deliverPending(w);
    w.fake.setNow('2026-03-11T11:00:00.000Z');
    w.t.clock.set('2026-03-11T11:00:00.000Z');
    w.fake.expireIncomplete(stripeSub);
    await deliverPending(w);
    expect((await mySubscription(user, agent.id)).body.data).toMatchObject({
      id: freeSubscription.id,
      currentPeriodStart: freeSubscription.currentPeriodStart,
    });
    expect((await use('calls')).status).toBe(429);

    // and starting the free tier again continues its cycle, as after any free subscription
    expect((await w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: user.cookie })).status).toBe(200);
    const again = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: free.id } });
    expect(again.body.data.subscription.currentPeriodStart).toBe(freeSubscription.currentPeriodStart);
    expect((await use('calls')).status).toBe(429);
    expect((await use('sites')).status).toBe(429);
  });

  it('attack: a subscription that never granted access is not the one a later subscription continues', async () => {
    const { agent, free, pro, user, use } = await usedUpFreeTier();
    expect((await w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: user.cookie })).status).toBe(200);

    // With no live subscription, an unpaid checkout is recorded as incomplete (no access) and then expires.
    const expired = await checkoutPending(user, pro.id);
    await deliverPending(w);
    expect(await rowOf(expired)).toMatchObject({ status: 'incomplete' });
    w.fake.expireIncomplete(expired);
    await deliverPending(w);
    expect(await rowOf(expired)).toMatchObject({ status: 'canceled' });

    // One that expired before any of its events arrived is first seen ended: recorded (history), never granting access.
    const unseen = await checkoutPending(user, pro.id);
    w.fake.expireIncomplete(unseen);
    await deliverPending(w);
    expect(await rowOf(unseen)).toMatchObject({ status: 'canceled' });

    // The free tier again: the fixed counter is the one the user used up, not a never-paid row's nothing.
    expect((await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: free.id } })).status).toBe(201);
    expect((await use('sites')).status).toBe(429);
    expect((await use('calls')).status).toBe(429);
  });

  it('a subscription continues the earlier one when it first grants access: holds wait for it, counters carry once paid', async () => {
    // Before, the carry ran when a row was written, whatever its status: an unpaid (incomplete) row took the free
    // subscription's live holds, and the next free start found them gone.
    const { agent, free, pro, user, use } = await usedUpFreeTier();
    const token = await agentToken(w.t, user, agent.id);
    // room for a hold on the fixed metric: the free tier's sites quota raised from 2 (used) to 5
    await setQuota(w.t.db, free.id, (await first<{ id: string }>(w.t.db, sql`select id from metric_definitions where agent_id = ${agent.id} and slug = 'sites'`))!.id, 5);
    const held = await w.t.http.post(`/me/usage/${agent.id}/sites/reservations`, { bearer: token, json: { clientReqId: reqId(), amount: 3, ttlSeconds: 3600 } });
    expect(held.status, held.text).toBe(201);
    expect((await w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: user.cookie })).status).toBe(200);

    const stripeSub = await checkoutPending(user, pro.id);
    await deliverPending(w);
    expect(await rowOf(stripeSub)).toMatchObject({ status: 'incomplete' });
    const holdsOn = async () =>
      (await first<{ subscription_id: string }>(w.t.db, sql`select subscription_id from usage_reservations where id = ${held.body.data.id}`))!.subscription_id;
    const freeRow = await first<{ id: string }>(w.t.db, sql`select id from subscriptions where user_id = ${user.userId} and stripe_subscription_id is null`);
    expect(await holdsOn()).toBe(freeRow!.id); // the unpaid row took nothing

    w.fake.payInvoice(w.fake.subscriptions.get(stripeSub)!.latest_invoice);
    await deliverPending(w);
    const paidRow = (await rowOf(stripeSub))!;
    expect(paidRow.status).toBe('active');
    // paid: it continues the free one now, the fixed counter and the hold with it
    expect(await holdsOn()).toBe(paidRow.id);
    const usage = await w.t.http.get(`/me/usage/${agent.id}/sites`, { bearer: token });
    expect(usage.body.data).toMatchObject({ used: 2, reserved: 3 });
    expect((await use('sites', 95)).status).toBe(200);
    expect((await use('sites')).status).toBe(429);
  });
});
