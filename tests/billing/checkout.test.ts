import Ajv2020 from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { CHECKOUTS_PER_DAY, PORTAL_SESSIONS_PER_DAY } from '../../functions/billing/allowances.ts';
import { insertTier } from '../support/fixtures.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, buyPaidTier, countRows, deliverPending, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/** Signed-in checkout (free and paid), verify-session, the user's subscriptions and their access control. */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

describe('startCheckout (POST /me/checkout)', () => {
  it('starts a free tier at once: 201 with the active subscription', async () => {
    const agent = await activeAgent(w);
    const free = await insertTier(w.t.db, agent.id, { priceCents: 0 });
    const user = await signUp(w.t);
    const res = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: free.id } });
    expect(res.status).toBe(201);
    expect(res.body.data.subscription).toMatchObject({ userId: user.userId, agentId: agent.id, tierId: free.id, status: 'active' });
    const mine = await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie });
    expect(mine.status).toBe(200);
    expect(mine.body.data.id).toBe(res.body.data.subscription.id);
    // Nothing went to Stripe for a free tier.
    expect(w.fake.requests.filter((r) => r.path.includes('checkout'))).toHaveLength(0);
  });

  it('sends a paid tier to Stripe Checkout and writes nothing locally until the webhook', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 2500 });
    const user = await signUp(w.t);
    const before = await countRows(w.t, 'subscriptions');
    const res = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ checkoutUrl: expect.stringContaining(res.body.data.sessionId), sessionId: expect.stringMatching(/^cs_/) });
    expect(await countRows(w.t, 'subscriptions')).toBe(before);

    const session = w.fake.sessions.get(res.body.data.sessionId)!;
    expect(session.mode).toBe('subscription');
    expect(session.client_reference_id).toBe(user.userId);
    expect(session._subscription_metadata).toEqual({ userId: user.userId, tierId: tier.id, agentId: agent.id });
    expect(session._line_items).toEqual([{ price: tier.stripePriceId, quantity: 1 }]);
    expect(w.fake.customers.get(session.customer)?.email).toBe(user.email);

    // Not placed before Stripe says so.
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).status).toBe(404);
    const stripeSub = w.fake.completeCheckout(res.body.data.sessionId);
    await deliverPending(w);
    const mine = await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie });
    expect(mine.status).toBe(200);
    const item = stripeSub.items.data[0];
    expect(mine.body.data).toMatchObject({
      userId: user.userId,
      agentId: agent.id,
      tierId: tier.id,
      status: 'active',
      cancelAtPeriodEnd: false,
      pendingTierId: null,
      pendingChangeKind: null,
      currentPeriodStart: new Date(item.current_period_start * 1000).toISOString(),
      currentPeriodEnd: new Date(item.current_period_end * 1000).toISOString(),
    });
  });

  it("makes one Stripe customer for a user's concurrent first checkouts, and every one of them succeeds", async () => {
    const agent = await activeAgent(w);
    const tier = await insertTier(w.t.db, agent.id, { priceCents: 900, interval: 'month' });
    for (let round = 0; round < 5; round++) {
      const user = await signUp(w.t);
      const answers = await Promise.all(
        Array.from({ length: 6 }, () => w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } })),
      );
      expect(answers.map((a) => a.status)).toEqual(Array(6).fill(200));
      const linked = await first<{ n: number }>(w.t.db, sql`select count(*)::int as n from billing_customers where user_id = ${user.userId}`);
      expect(linked!.n).toBe(1);
      expect([...w.fake.customers.values()].filter((c) => c.metadata.userId === user.userId)).toHaveLength(1);
    }
  });

  it('gives a paid tier made before Stripe was configured its product and price on the first checkout', async () => {
    const agent = await activeAgent(w);
    const seeded = await insertTier(w.t.db, agent.id, { priceCents: 1500, interval: 'year' });
    const user = await signUp(w.t);
    const [a, b] = await Promise.all([
      w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: seeded.id } }),
      w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: seeded.id } }),
    ]);
    expect([a.status, b.status]).toEqual([200, 200]);
    const row = await first<{ price: string }>(w.t.db, sql`select stripe_price_id as price from tiers where id = ${seeded.id}`);
    expect(w.fake.prices.get(row!.price)).toMatchObject({ unit_amount: 1500, recurring: { interval: 'year' } });
    expect(w.fake.sessions.get(a.body.data.sessionId)!._line_items[0].price).toBe(row!.price);
    expect(w.fake.sessions.get(b.body.data.sessionId)!._line_items[0].price).toBe(row!.price);
    // Concurrent first checkouts made one product at Stripe (idempotency keys per tier).
    expect([...w.fake.products.values()].filter((p) => p.metadata.tierId === seeded.id)).toHaveLength(1);
  });

  it('reuses one Stripe customer per user across checkouts', async () => {
    const user = await signUp(w.t);
    const a = await activeAgent(w);
    const b = await activeAgent(w);
    const ta = await paidTier(w, a.id);
    const tb = await paidTier(w, b.id);
    const s1 = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: ta.id } });
    const s2 = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tb.id } });
    expect(w.fake.sessions.get(s1.body.data.sessionId)!.customer).toBe(w.fake.sessions.get(s2.body.data.sessionId)!.customer);
  });

  it('converts a live free subscription in place when the user buys a paid tier of the same agent', async () => {
    const agent = await activeAgent(w);
    const free = await insertTier(w.t.db, agent.id, { priceCents: 0 });
    const tier = await paidTier(w, agent.id);
    const user = await signUp(w.t);
    const started = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: free.id } });
    const { subscriptionId } = await buyPaidTier(w, user, tier.id);
    expect(subscriptionId).toBe(started.body.data.subscription.id);
    const mine = await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie });
    expect(mine.body.data).toMatchObject({ id: subscriptionId, tierId: tier.id, status: 'active' });
  });

  it('refuses a second paid checkout for an agent the user already pays for (422 INVALID_STATE)', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const other = await paidTier(w, agent.id, { priceCents: 9000 });
    const user = await signUp(w.t);
    await buyPaidTier(w, user, tier.id);
    const res = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: other.id } });
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe('INVALID_STATE');
  });

  it('Stripe failing (5xx after the SDK retried) answers 503 UNAVAILABLE with Retry-After, as every 503 does', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const user = await signUp(w.t);
    w.fake.outage('POST /v1/checkout/sessions');
    try {
      const res = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
      expect([res.status, res.body.error?.code, res.body.error?.details]).toEqual([503, 'UNAVAILABLE', { provider: 'stripe', reason: 'StripeAPIError' }]);
      expect(res.headers.get('retry-after')).toBe('5');
    } finally {
      w.fake.recover();
    }
  });

  it('a checkout Stripe refuses (a price under its minimum charge) answers 422 with its reason, not 500, and writes nothing', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 1 });
    const user = await signUp(w.t);
    w.fake.outage('POST /v1/checkout/sessions', { status: 400, type: 'invalid_request_error', code: 'amount_too_small' });
    try {
      for (const res of [
        await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } }),
        await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } }),
      ]) {
        expect([res.status, res.body.error?.code, res.body.error?.details]).toEqual([422, 'INVALID_STATE', { provider: 'stripe', code: 'amount_too_small' }]);
        expect(res.body.error.message).toMatch(/^Stripe refused the checkout: /);
      }
    } finally {
      w.fake.recover();
    }
    expect(await first(w.t.db, sql`select 1 as x from subscriptions where user_id = ${user.userId}`)).toBeUndefined();
  });

  it('attack: a tier made before Stripe was configured whose price Stripe refuses, or a customer Stripe refuses, answers 422, not 500, and writes nothing', async () => {
    // ensureTierPrice (the first checkout of such a tier) and ensureCustomer called Stripe with callStripe: its
    // refusal was a 500 for every buyer of the tier (found by a review).
    const agent = await activeAgent(w);
    const seeded = await insertTier(w.t.db, agent.id, { priceCents: 1000, currency: 'zzz' });
    const user = await signUp(w.t);
    const refused = async (request: string, code: string, tierId: string) => {
      w.fake.outage(request, { status: 400, type: 'invalid_request_error', code });
      try {
        return await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId } });
      } finally {
        w.fake.recover();
      }
    };
    const price = await refused('POST /v1/prices', 'parameter_invalid_string', seeded.id);
    expect([price.status, price.body.error?.code, price.body.error?.details], price.text).toEqual([422, 'INVALID_STATE', { provider: 'stripe', code: 'parameter_invalid_string' }]);
    expect(await first<{ price: string | null }>(w.t.db, sql`select stripe_price_id as price from tiers where id = ${seeded.id}`)).toEqual({ price: null });

    const tier = await paidTier(w, agent.id);
    const customer = await refused('POST /v1/customers', 'email_invalid', tier.id);
    expect([customer.status, customer.body.error?.code, customer.body.error?.details], customer.text).toEqual([422, 'INVALID_STATE', { provider: 'stripe', code: 'email_invalid' }]);
    expect(customer.body.error.message).toMatch(/^Stripe refused the customer: /);
    expect(await first(w.t.db, sql`select 1 as x from billing_customers where user_id = ${user.userId}`)).toBeUndefined();
  });

  it('answers 404 for unknown, hidden or archived tiers and tiers of inactive agents', async () => {
    const user = await signUp(w.t);
    const agent = await activeAgent(w);
    const hidden = await paidTier(w, agent.id, { isPublic: false });
    const inactive = await activeAgent(w);
    const inactiveTier = await insertTier(w.t.db, inactive.id, { priceCents: 0 });
    await sql`update agents set status = 'inactive' where id = ${inactive.id}`.execute(w.t.db);
    const draft = await activeAgent(w);
    const draftTier = await insertTier(w.t.db, draft.id, { priceCents: 0 });
    await sql`update agents set status = 'draft' where id = ${draft.id}`.execute(w.t.db);
    for (const tierId of ['6f1c1f9e-2a8b-4a57-a0a5-0b7c2d0e9b11', hidden.id, inactiveTier.id, draftTier.id]) {
      const res = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId } });
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('NOT_FOUND');
      // the same answer for every case (nothing disclosed), and it names the draft-agent trap
      expect(res.body.error.message).toContain('a new agent is draft until its status is active');
    }
  });

  it('validates the body and refuses return URLs on other origins', async () => {
    const user = await signUp(w.t);
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const bad = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: 'nope' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('VALIDATION_ERROR');
    const evil = await w.t.http.post('/me/checkout', {
      cookie: user.cookie,
      json: { tierId: tier.id, successUrl: 'https://evil.example/steal?session={CHECKOUT_SESSION_ID}' },
    });
    expect(evil.status).toBe(400);
    expect(evil.body.error.details.issues[0].path).toBe('successUrl');
    const own = await w.t.http.post('/me/checkout', {
      cookie: user.cookie,
      json: { tierId: tier.id, successUrl: `${w.t.baseUrl}/done?s={CHECKOUT_SESSION_ID}` },
    });
    expect(own.status).toBe(200);
    expect(w.fake.sessions.get(own.body.data.sessionId)!.success_url).toBe(`${w.t.baseUrl}/done?s={CHECKOUT_SESSION_ID}`);
  });

  it('needs a signed-in user (401 with sign-in links)', async () => {
    const res = await w.t.http.post('/me/checkout', { json: { tierId: '6f1c1f9e-2a8b-4a57-a0a5-0b7c2d0e9b11' } });
    expect(res.status).toBe(401);
    expect(res.body.error.details.signInUrl).toBeTruthy();
  });
});

describe('verifyCheckoutSession (GET /me/checkout/{sessionId})', () => {
  it("reads the buyer's own session through from Stripe and writes nothing", async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const user = await signUp(w.t);
    const checkout = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
    const sessionId = checkout.body.data.sessionId;
    const open = await w.t.http.get(`/me/checkout/${sessionId}`, { cookie: user.cookie });
    expect(open.status).toBe(200);
    expect(open.body.data).toEqual({ sessionId, status: 'open', paymentStatus: 'unpaid', agentId: agent.id, tierId: tier.id, subscription: null });

    // Paid at Stripe, webhook not yet delivered: the read shows Stripe's state and still writes nothing.
    w.fake.completeCheckout(sessionId);
    const subsBefore = await countRows(w.t, 'subscriptions');
    const eventsBefore = await countRows(w.t, 'stripe_events');
    const paid = await w.t.http.get(`/me/checkout/${sessionId}`, { cookie: user.cookie });
    expect(paid.body.data).toMatchObject({ status: 'complete', paymentStatus: 'paid', subscription: null });
    expect(await countRows(w.t, 'subscriptions')).toBe(subsBefore);
    expect(await countRows(w.t, 'stripe_events')).toBe(eventsBefore);

    await deliverPending(w);
    const placed = await w.t.http.get(`/me/checkout/${sessionId}`, { cookie: user.cookie });
    expect(placed.body.data.subscription).toMatchObject({ userId: user.userId, tierId: tier.id, status: 'active' });

    // Each answer, `subscription: null` ones too, is what /openapi.json documents (it said allOf [Subscription, null],
    // which no null meets, and the generated client typed the field as never null: review 56).
    const document = (await w.t.http.get('/openapi.json')).body;
    const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
    ajv.addSchema({ ...document, $id: 'openapi' });
    const documented = ajv.compile({ $ref: 'openapi#/paths/~1me~1checkout~1{sessionId}/get/responses/200/content/application~1json/schema' });
    for (const answer of [open, paid, placed]) {
      documented(answer.body);
      expect([answer.body.data.status, documented.errors ?? []]).toEqual([answer.body.data.status, []]);
    }
  });

  it("hides other users' sessions (404), needs sign-in (401), and checks the id's shape (400)", async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const owner = await signUp(w.t);
    const other = await signUp(w.t);
    const checkout = await w.t.http.post('/me/checkout', { cookie: owner.cookie, json: { tierId: tier.id } });
    const sessionId = checkout.body.data.sessionId;
    expect((await w.t.http.get(`/me/checkout/${sessionId}`, { cookie: other.cookie })).status).toBe(404);
    expect((await w.t.http.get(`/me/checkout/${sessionId}`)).status).toBe(401);
    expect((await w.t.http.get('/me/checkout/cs_test_doesnotexist', { cookie: owner.cookie })).status).toBe(404);
    expect((await w.t.http.get('/me/checkout/not-a-session', { cookie: owner.cookie })).status).toBe(400);
  });
});

describe('listMySubscriptions / getMySubscription', () => {
  it("lists only the caller's subscriptions and 404s an agent without an active one", async () => {
    const agent = await activeAgent(w);
    const free = await insertTier(w.t.db, agent.id, { priceCents: 0 });
    const user = await signUp(w.t);
    const other = await signUp(w.t);
    await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: free.id } });
    const list = await w.t.http.get('/me/subscriptions', { cookie: user.cookie });
    expect(list.status).toBe(200);
    expect(list.body.data.map((s: { agentId: string }) => s.agentId)).toEqual([agent.id]);
    expect((await w.t.http.get('/me/subscriptions', { cookie: other.cookie })).body.data).toEqual([]);
    const none = await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: other.cookie });
    expect(none.status).toBe(404);
    expect(none.body.error.code).toBe('NOT_FOUND');
    expect((await w.t.http.get('/me/subscriptions')).status).toBe(401);
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`)).status).toBe(401);
    expect((await w.t.http.get('/me/subscriptions/not-a-uuid', { cookie: user.cookie })).status).toBe(400);
  });
});

describe('without Stripe configured', () => {
  it('free tiers work and every paid path answers 503 PAYMENTS_NOT_CONFIGURED', async () => {
    const { startTestApp } = await import('../support/app.ts');
    const { createAdmin } = await import('../support/users.ts');
    const t = await startTestApp();
    try {
      const admin = await createAdmin(t);
      const agent = await (await import('../support/fixtures.ts')).insertAgent(t.db, { status: 'active' });
      const free = await insertTier(t.db, agent.id, { priceCents: 0 });
      // A paid tier can be created (a catalog can be prepared before Stripe is set up); it has no Stripe price.
      const paid = await t.http.post(`/agents/${agent.id}/pricing`, {
        cookie: admin.cookie,
        json: { name: 'Pro', priceCents: 1000, currency: 'usd', interval: 'month', isPublic: true, features: [] },
      });
      expect(paid.status).toBe(201);
      const row = await first<{ price: string | null }>(t.db, sql`select stripe_price_id as price from tiers where id = ${paid.body.data.id}`);
      expect(row!.price).toBeNull();

      const user = await signUp(t);
      expect((await t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: free.id } })).status).toBe(201);
      const calls = [
        await t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: paid.body.data.id } }),
        await t.http.post('/checkout/anonymous', { json: { tierId: paid.body.data.id } }),
        await t.http.post('/checkout/anonymous/complete', { json: { sessionId: 'cs_test_x' } }),
        await t.http.get('/me/checkout/cs_test_x', { cookie: user.cookie }),
        await t.http.post('/me/billing-portal', { cookie: user.cookie, json: { flow: 'overview' } }),
        await t.http.post('/admin/checkout-links', { cookie: admin.cookie, json: { userId: user.userId, tierId: paid.body.data.id } }),
        await t.http.post('/webhooks/stripe', { body: '{}', headers: { 'content-type': 'application/json', 'stripe-signature': 't=1,v1=x' } }),
      ];
      for (const res of calls) {
        expect(res.status).toBe(503);
        expect(res.body.error.code).toBe('PAYMENTS_NOT_CONFIGURED');
      }
      // Cancelling a free subscription needs no Stripe.
      const canceled = await t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: user.cookie });
      expect(canceled.status).toBe(200);
      expect(canceled.body.data.status).toBe('canceled');
    } finally {
      await t.close();
    }
  });
});

describe("a user's daily allowance of checkouts and portal sessions", () => {
  it(`attack: scripted checkouts stop at ${CHECKOUTS_PER_DAY} a day (free starts count), portal sessions at ${PORTAL_SESSIONS_PER_DAY}; nothing more reaches Stripe`, async () => {
    // Every paid checkout and portal request makes an object at Stripe under the marketplace's one account, whose
    // API rate limit every buyer shares; every free start writes a subscription row (found by a user-side review).
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const free = await insertTier(w.t.db, (await activeAgent(w)).id, { priceCents: 0 });
    const user = await signUp(w.t);
    const checkout = (tierId: string, cookie = user.cookie) => w.t.http.post('/me/checkout', { cookie, json: { tierId } });
    const portal = (cookie = user.cookie) => w.t.http.post('/me/billing-portal', { cookie, json: { flow: 'overview' } });

    expect((await checkout(free.id)).status).toBe(201);
    for (let i = 1; i < CHECKOUTS_PER_DAY; i++) expect((await checkout(tier.id)).status).toBe(200);
    const sessionsBefore = w.fake.sessions.size;
    for (const res of [await checkout(tier.id), await checkout(free.id)]) {
      expect([res.status, res.body.error?.code]).toEqual([429, 'RATE_LIMITED']);
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(res.body.error.details.limitPerDay).toBe(CHECKOUTS_PER_DAY);
    }
    expect(w.fake.sessions.size).toBe(sessionsBefore);

    for (let i = 0; i < PORTAL_SESSIONS_PER_DAY; i++) expect((await portal()).status).toBe(200);
    const portalsBefore = w.fake.portalSessions.size;
    expect((await portal()).status).toBe(429);
    expect(w.fake.portalSessions.size).toBe(portalsBefore);

    // Another user is not held back by this one's count; the next day brings a new allowance.
    expect((await checkout(tier.id, (await signUp(w.t)).cookie)).status).toBe(200);
    w.t.clock.advance(24 * 60 * 60 * 1000 + 1000);
    expect((await checkout(tier.id)).status).toBe(200);
    expect((await portal()).status).toBe(200);
  });
});
