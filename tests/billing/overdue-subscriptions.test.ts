import type Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { signIn, signUp, type TestUser } from '../support/users.ts';
import { activeAgent, buyPaidTier, DRAIN_TOKEN, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * Stripe gives up on a webhook delivery after three days; a paid row changes only when an event comes. The background
 * work reads again from Stripe the live paid subscriptions whose period ended a day ago (docs/billing.md, "Events that
 * never came"; found by review 15: a cancellation whose event was lost was served for good).
 */
let w: BillingWorld;
let stripe: Stripe;
beforeAll(async () => {
  w = await startBillingWorld({ env: { DRAIN_TOKEN } });
  stripe = w.fake.client();
});
afterAll(() => w.close());

const DAY = 24 * 60 * 60_000;

const drain = async () => {
  const res = await w.t.http.post('/internal/drain', { bearer: DRAIN_TOKEN });
  expect(res.status, res.text).toBe(200);
  return res.body.data.overdueSubscriptions as { reread: number; failed: number };
};

const row = (stripeSubscriptionId: string) =>
  first<{ status: string; periodStart: Date }>(
    w.t.db,
    sql`select status, current_period_start as "periodStart" from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`,
  );

/** The user's view at the service's clock: signed in afresh, since a drain at a later clock prunes expired sessions. */
const access = async (user: TestUser, agentId: string) =>
  (await w.t.http.get(`/me/subscriptions/${agentId}`, { cookie: (await signIn(w.t, user)).cookie })).status;

/** A paid subscriber, bought now, whose Stripe events from then on are lost (never delivered). */
async function subscriber() {
  w.t.clock.set(new Date());
  w.admin = await signIn(w.t, w.admin);
  const agent = await activeAgent(w);
  const tier = await paidTier(w, agent.id);
  const user = await signUp(w.t);
  const bought = await buyPaidTier(w, user, tier.id);
  const periodEnd = new Date(w.fake.subscriptions.get(bought.stripeSubscriptionId)!.items.data[0].current_period_end * 1000);
  return { agent, user, periodEnd, ...bought };
}

describe('paid subscriptions overdue for an event are read again from Stripe', () => {
  it('a cancellation at Stripe whose events never came ends access a day after the period, not never', async () => {
    const s = await subscriber();
    await stripe.subscriptions.cancel(s.stripeSubscriptionId);
    w.fake.takeEvents(); // lost: the endpoint was down for longer than Stripe retries
    expect(await access(s.user, s.agent.id)).toBe(200);

    // Within the day after the period's end the row may still be waiting for Stripe's own event: not read.
    w.t.clock.set(new Date(s.periodEnd.getTime() + DAY / 2));
    expect(await drain()).toEqual({ reread: 0, failed: 0 });
    expect(await access(s.user, s.agent.id)).toBe(200);

    w.t.clock.set(new Date(s.periodEnd.getTime() + DAY + 60_000));
    expect(await drain()).toEqual({ reread: 1, failed: 0 });
    expect((await row(s.stripeSubscriptionId))!.status).toBe('canceled');
    expect(await access(s.user, s.agent.id)).toBe(404);
    expect(await drain()).toEqual({ reread: 0, failed: 0 });
  });

  it('a renewal whose events never came moves the row into its new period', async () => {
    const s = await subscriber();
    w.fake.advancePeriod(s.stripeSubscriptionId);
    w.fake.takeEvents();
    const renewed = new Date(w.fake.subscriptions.get(s.stripeSubscriptionId)!.items.data[0].current_period_start * 1000);
    expect(renewed.getTime()).toBe(s.periodEnd.getTime());

    w.t.clock.set(new Date(s.periodEnd.getTime() + 2 * DAY));
    expect(await drain()).toEqual({ reread: 1, failed: 0 });
    expect(await row(s.stripeSubscriptionId)).toMatchObject({ status: 'active', periodStart: renewed });
    expect(await access(s.user, s.agent.id)).toBe(200);
  });

  it('one whose read changes nothing is read again after 6 hours, not every round; one gone from Stripe is logged and kept', async () => {
    const s = await subscriber();
    // Stripe reads of this subscription (the rows of the tests before may be overdue at this clock too)
    const reads = () => w.fake.requests.filter((r) => r.method === 'GET' && r.path === `/v1/subscriptions/${s.stripeSubscriptionId}`).length;
    const before = reads();
    // The service's clock is past the period; Stripe's is not (nothing to move the row on).
    w.t.clock.set(new Date(s.periodEnd.getTime() + 2 * DAY));
    await drain();
    expect(reads()).toBe(before + 1);
    await drain();
    expect(reads()).toBe(before + 1);
    w.t.clock.advance(6 * 60 * 60_000);
    await drain();
    expect(reads()).toBe(before + 2);

    w.fake.subscriptions.delete(s.stripeSubscriptionId);
    w.t.clock.advance(6 * 60 * 60_000);
    expect(await drain()).toMatchObject({ failed: 1 });
    expect((await row(s.stripeSubscriptionId))!.status).toBe('active');
    expect(w.t.logs.some((l) => l.msg === 'an overdue paid subscription is unknown to Stripe; it stays as it is')).toBe(true);
  });
});
