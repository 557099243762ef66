import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { insertTier } from '../support/fixtures.ts';
import { lastMailTo, linkIn } from '../support/mail.ts';
import { signIn, signUp } from '../support/users.ts';
import { activeAgent, deliver, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/** Anonymous checkout: Stripe collects the email; the success page and the webhook both may place it, once. */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

async function paidAnonymously(email: string) {
  const agent = await activeAgent(w);
  const tier = await paidTier(w, agent.id);
  const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
  expect(start.status).toBe(200);
  w.fake.takeEvents();
  const stripeSub = w.fake.completeCheckout(start.body.data.sessionId, { email, name: 'Ann Buyer' });
  return { agent, tier, sessionId: start.body.data.sessionId as string, stripeSub, events: w.fake.takeEvents() };
}

const complete = (sessionId: string) => w.t.http.post('/checkout/anonymous/complete', { json: { sessionId } });

describe('startAnonymousCheckout (POST /checkout/anonymous)', () => {
  it('opens a Checkout session with no customer, so Stripe asks for the email', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const res = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ checkoutUrl: expect.any(String), sessionId: expect.stringMatching(/^cs_/) });
    const session = w.fake.sessions.get(res.body.data.sessionId)!;
    expect(session.customer).toBeNull();
    expect(session._subscription_metadata).toEqual({ tierId: tier.id, agentId: agent.id, anonymous: 'true' });
  });

  it('refuses free tiers (422: they need an account) and unknown tiers (404)', async () => {
    const agent = await activeAgent(w);
    const free = await insertTier(w.t.db, agent.id, { priceCents: 0 });
    const res = await w.t.http.post('/checkout/anonymous', { json: { tierId: free.id } });
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe('INVALID_STATE');
    expect((await w.t.http.post('/checkout/anonymous', { json: { tierId: '6f1c1f9e-2a8b-4a57-a0a5-0b7c2d0e9b11' } })).status).toBe(404);
    expect((await w.t.http.post('/checkout/anonymous', { json: {} })).status).toBe(400);
  });
});

describe('completeAnonymousCheckout (POST /checkout/anonymous/complete)', () => {
  it('creates the buyer account, activates the subscription and mails a set-password link', async () => {
    const email = `buyer-${Date.now()}@example.test`;
    const { agent, tier, sessionId } = await paidAnonymously(email);
    const res = await complete(sessionId);
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      created: true,
      user: { id: expect.any(String), email },
      subscription: { agentId: agent.id, tierId: tier.id, status: 'active' },
    });
    expect(res.body.data.subscription.userId).toBe(res.body.data.user.id);

    // The account is a real user: the mailed reset link sets a password that signs in.
    const mail = await lastMailTo(w.t, email);
    const token = linkIn(mail).pathname.split('/').pop()!;
    const reset = await w.t.http.post('/api/auth/reset-password', { json: { newPassword: 'a-new-password-1', token } });
    expect(reset.status).toBe(200);
    const buyer = await signIn(w.t, { email, password: 'a-new-password-1' });
    const mine = await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: buyer.cookie });
    expect(mine.body.data.id).toBe(res.body.data.subscription.id);

    // Completing again changes nothing and still answers.
    const again = await complete(sessionId);
    expect(again.status).toBe(200);
    expect(again.body.data.subscription.id).toBe(res.body.data.subscription.id);
    expect(again.body.data.created).toBe(true);
  });

  it('attaches the purchase to an existing account with that email (no new account, no mail)', async () => {
    const existing = await signUp(w.t);
    const { agent, sessionId } = await paidAnonymously(existing.email.toUpperCase());
    const res = await complete(sessionId);
    expect(res.body.data).toMatchObject({ created: false, user: { id: existing.userId, email: existing.email } });
    const mine = await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: existing.cookie });
    expect(mine.status).toBe(200);
  });

  it('yields one subscription and one account when the success page and the webhook race', async () => {
    for (let round = 0; round < 3; round++) {
      const email = `race-${round}-${Date.now()}@example.test`;
      const { sessionId, stripeSub, events } = await paidAnonymously(email);
      const results = await Promise.all([complete(sessionId), deliver(w, events), complete(sessionId), deliver(w, [...events].reverse())]);
      expect(results[0]!.status).toBe(200);
      expect(results[2]!.status).toBe(200);
      const subs = await rows(w.t.db, sql`select id from subscriptions where stripe_subscription_id = ${stripeSub.id}`);
      expect(subs).toHaveLength(1);
      const users = await rows(w.t.db, sql`select id from "user" where email = ${email}`);
      expect(users).toHaveLength(1);
      expect(results[0]!.body.data.subscription.id).toBe(results[2]!.body.data.subscription.id);
      const mails = await rows(w.t.db, sql`select id from mail_outbox where to_address = ${email}`);
      expect(mails).toHaveLength(1);
    }
  });

  it('places the subscription from the webhook alone when the buyer never returns', async () => {
    const email = `away-${Date.now()}@example.test`;
    const { stripeSub, events } = await paidAnonymously(email);
    await deliver(w, events);
    const row = await first<{ email: string }>(
      w.t.db,
      sql`select u.email from subscriptions s join "user" u on u.id = s.user_id where s.stripe_subscription_id = ${stripeSub.id}`,
    );
    expect(row!.email).toBe(email);
  });

  it('answers 422 before payment, 404 for unknown or signed-in sessions, 400 for a malformed id', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const open = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    const notPaid = await complete(open.body.data.sessionId);
    expect(notPaid.status).toBe(422);
    expect(notPaid.body.error.code).toBe('INVALID_STATE');

    expect((await complete('cs_test_unknown')).status).toBe(404);
    expect((await complete('../etc')).status).toBe(400);

    // A signed-in buyer's session is not completed (nor revealed) through the public endpoint.
    const user = await signUp(w.t);
    const mine = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
    w.fake.completeCheckout(mine.body.data.sessionId);
    const res = await complete(mine.body.data.sessionId);
    expect(res.status).toBe(404);
    expect(res.text).not.toContain(user.email);
  });
});

describe('rate limit', () => {
  it('limits anonymous checkouts per client IP (429 RATE_LIMITED with Retry-After)', async () => {
    const limited = await startBillingWorld({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '2' } });
    try {
      const agent = await activeAgent(limited);
      const tier = await paidTier(limited, agent.id);
      const statuses: number[] = [];
      let last;
      for (let i = 0; i < 3; i++) {
        last = await limited.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
        statuses.push(last.status);
      }
      expect(statuses).toEqual([200, 200, 429]);
      expect(last!.body.error.code).toBe('RATE_LIMITED');
      expect(Number(last!.headers.get('retry-after'))).toBeGreaterThan(0);
    } finally {
      await limited.close();
    }
  });
});
