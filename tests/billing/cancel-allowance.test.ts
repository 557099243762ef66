import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { CANCELS_PER_DAY } from '../../functions/billing/allowances.ts';
import { insertTier } from '../support/fixtures.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, buyPaidTier, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * Cancelling a paid subscription reaches Stripe every time: a subscription already set to end at the period's end
 * skips the update but re-reads the subscription, so the answer says what Stripe says. Nothing counted it, so one
 * subscriber (or an agent backend with its users' tokens) sent Stripe one request per call, as fast as it liked, under
 * the marketplace's one Stripe account whose API rate limit every buyer's payments share (found by a review: 200
 * repeated cancels were 200 Stripe requests). A paid cancel now takes the asker's daily allowance (CANCELS_PER_DAY per
 * user and credential, as checkouts and portal sessions do), then 429 RATE_LIMITED with nothing sent to Stripe.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

describe('attack: a subscriber uses up the marketplace\'s Stripe rate limit through cancel', () => {
  test(`cancels of a paid subscription stop at ${CANCELS_PER_DAY} a day, and the refused ones reach Stripe not at all`, async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const user = await signUp(w.t);
    await buyPaidTier(w, user, tier.id);
    const cancel = () => w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: user.cookie });
    const first = await cancel();
    expect([first.status, first.body.data.cancelAtPeriodEnd]).toEqual([200, true]);

    const statuses: number[] = [];
    for (let i = 1; i < CANCELS_PER_DAY; i++) statuses.push((await cancel()).status);
    expect(statuses).toEqual(Array(CANCELS_PER_DAY - 1).fill(200));
    const before = w.fake.requests.length;
    const refused = await cancel();
    expect([refused.status, refused.body.error.code]).toEqual([429, 'RATE_LIMITED']);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    for (let i = 0; i < 10; i++) expect((await cancel()).status).toBe(429);
    expect(w.fake.requests.length - before).toBe(0);

    // The next day the subscriber may cancel again (and the answer still says what Stripe says).
    w.t.clock.advance(24 * 60 * 60 * 1000 + 1000);
    const nextDay = await cancel();
    expect([nextDay.status, nextDay.body.data.cancelAtPeriodEnd]).toEqual([200, true]);
  });

  test('a free subscription, which nothing at Stripe backs, is canceled whatever the allowance says', async () => {
    const agent = await activeAgent(w);
    const paid = await paidTier(w, agent.id);
    const user = await signUp(w.t);
    await buyPaidTier(w, user, paid.id);
    const cancel = () => w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: user.cookie });
    for (let i = 0; i < CANCELS_PER_DAY; i++) expect((await cancel()).status).toBe(200);
    expect((await cancel()).status).toBe(429);

    const other = await activeAgent(w);
    const freeTier = await insertTier(w.t.db, other.id, { name: 'Free' });
    expect((await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: freeTier.id } })).status).toBe(201);
    const ended = await w.t.http.post(`/me/subscriptions/${other.id}/cancel`, { cookie: user.cookie });
    expect([ended.status, ended.body.data.status]).toEqual([200, 'canceled']);
  });
});
