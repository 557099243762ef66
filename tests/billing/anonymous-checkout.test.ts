import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { insertTier } from '../support/fixtures.ts';
import { deliverMail, lastMailTo, linkIn, mailsTo } from '../support/mail.ts';
import { accessTokenFor, authorizeUrl, createOAuthClient, followAuthorize, pkcePair, postForm } from '../support/oauth.ts';
import { signIn, signUp, type TestUser } from '../support/users.ts';
import { activeAgent, buyPaidTier, completeAnonymous, deliver, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/** Anonymous checkout: Stripe collects the email; the success page and the webhook both may place it, once. */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

async function paidAnonymously(email: string, of?: { agent: { id: string }; tier: { id: string } }) {
  const agent = of?.agent ?? (await activeAgent(w));
  const tier = of?.tier ?? (await paidTier(w, agent.id));
  const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
  expect(start.status).toBe(200);
  w.fake.takeEvents();
  const stripeSub = w.fake.completeCheckout(start.body.data.sessionId, { email, name: 'Ann Buyer' });
  return { agent, tier, sessionId: start.body.data.sessionId as string, stripeSub, events: w.fake.takeEvents() };
}

const claim = (token: string) => w.t.http.post('/checkout/anonymous/claim', { json: { token } });
const CLAIM_SUBJECT = 'Confirm your Agent Marketplace purchase';
const claimMailsTo = async (email: string) => (await mailsTo(w.t, email)).filter((m) => m.subject === CLAIM_SUBJECT);
const claimTokenIn = (mail: { text: string }) => {
  const link = linkIn(mail);
  expect(link.origin + link.pathname).toBe(`${w.t.baseUrl}/claim`);
  return link.searchParams.get('token')!;
};
const localSubscription = (stripeSubscriptionId: string) =>
  first<{ id: string; userId: string }>(
    w.t.db,
    sql`select id, user_id as "userId" from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`,
  );
const refundsOf = (stripeSubscriptionId: string) =>
  [...w.fake.refunds.values()].filter((r) => r.metadata.stripeSubscriptionId === stripeSubscriptionId);
const customerLinksOf = (userId: string) =>
  rows<{ stripeCustomerId: string }>(
    w.t.db,
    sql`select stripe_customer_id as "stripeCustomerId" from billing_customers where user_id = ${userId}`,
  );

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
    const { agent, tier, sessionId, stripeSub } = await paidAnonymously(email);
    const subscriptionReads = () => w.fake.requests.filter((r) => r.method === 'GET' && r.path === `/v1/subscriptions/${stripeSub.id}`).length;
    const readsBefore = subscriptionReads();
    const res = await completeAnonymous(w, sessionId);
    expect(res.status).toBe(200);
    // One read of the subscription serves both the check that Stripe still has it and the write (it was two).
    expect(subscriptionReads() - readsBefore).toBe(1);
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
    const again = await completeAnonymous(w, sessionId);
    expect(again.status).toBe(200);
    expect(again.body.data.subscription.id).toBe(res.body.data.subscription.id);
    expect(again.body.data.created).toBe(true);
  });

  it('attaches the purchase at once to an existing account whose email is verified (no new account)', async () => {
    const existing = await signUp(w.t, { verified: true });
    const { agent, sessionId } = await paidAnonymously(existing.email.toUpperCase());
    const res = await completeAnonymous(w, sessionId);
    expect(res.body.data).toMatchObject({ created: false, user: { id: existing.userId, email: existing.email } });
    expect(res.status).toBe(200);
    const mine = await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: existing.cookie });
    expect(mine.status).toBe(200);
    expect(await claimMailsTo(existing.email)).toEqual([]);
  });

  it('yields one subscription and one account when the success page and the webhook race', async () => {
    for (let round = 0; round < 3; round++) {
      const email = `race-${round}-${Date.now()}@example.test`;
      const { sessionId, stripeSub, events } = await paidAnonymously(email);
      const results = await Promise.all([completeAnonymous(w, sessionId), deliver(w, events), completeAnonymous(w, sessionId), deliver(w, [...events].reverse())]);
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
    const notPaid = await completeAnonymous(w, open.body.data.sessionId);
    expect(notPaid.status).toBe(422);
    expect(notPaid.body.error.code).toBe('INVALID_STATE');

    expect((await completeAnonymous(w, 'cs_test_unknown')).status).toBe(404);
    expect((await completeAnonymous(w, '../etc')).status).toBe(400);

    // A signed-in buyer's session is not completed (nor revealed) through the public endpoint.
    const user = await signUp(w.t);
    const mine = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
    w.fake.completeCheckout(mine.body.data.sessionId);
    const res = await completeAnonymous(w, mine.body.data.sessionId);
    expect(res.status).toBe(404);
    expect(res.text).not.toContain(user.email);
  });
});

  it("attack on a ban: an anonymous purchase with a banned account's verified address is refunded and canceled, never served", async () => {
    // The anonymous checkout knows no user until Stripe's page has the email; the purchase then attaches to the
    // verified owner of that address, and the banned-buyer rule (subscription-state.ts) undoes it there.
    const banned = await signUp(w.t, { verified: true });
    expect((await w.t.http.post(`/admin/users/${banned.userId}/ban`, { cookie: w.admin.cookie, json: {} })).status).toBe(200);
    const { agent, sessionId, stripeSub, events } = await paidAnonymously(banned.email);
    const res = await completeAnonymous(w, sessionId);
    expect(res.status).toBe(200);
    expect(res.body.data.subscription).toMatchObject({ userId: banned.userId, status: 'canceled' });
    await deliver(w, events);
    expect(w.fake.subscriptions.get(stripeSub.id)!.status).toBe('canceled');
    expect(refundsOf(stripeSub.id).map((r) => r.metadata.bannedUserId)).toEqual([banned.userId]);
    expect((await localSubscription(stripeSub.id))).toMatchObject({ userId: banned.userId });
    const access = await first<{ n: number }>(
      w.t.db,
      sql`select count(*)::int as n from subscriptions where user_id = ${banned.userId} and agent_id = ${agent.id} and status in ('active', 'past_due')`,
    );
    expect(access!.n).toBe(0);
  });

describe('anonymous purchases and unverified accounts (account pre-hijacking, issue 10 finding 4)', () => {
  /** The attacker signs up with the victim's address (never verified: the verification mail goes to the victim). */
  async function attackerHolding(email: string) {
    return signUp(w.t, { email, name: 'Attacker' });
  }

  /** What the attacker's account holds: no subscription, no Stripe customer. */
  async function expectNothingAttachedTo(user: TestUser, stripeSubscriptionId: string, agentId: string) {
    expect(await localSubscription(stripeSubscriptionId)).toBeUndefined();
    expect(await customerLinksOf(user.userId)).toEqual([]);
    const mine = await w.t.http.get('/me/subscriptions', { cookie: user.cookie });
    expect(mine.status).toBe(200);
    expect(mine.body.data).toEqual([]);
    expect((await w.t.http.get(`/me/subscriptions/${agentId}`, { cookie: user.cookie })).status).toBe(404);
  }

  /** Follows the claim link as the victim: claim, then the set-password step; returns the victim's session. */
  async function claimAndSetPassword(token: string, email: string) {
    const res = await claim(token);
    expect(res.status, res.text).toBe(200);
    const reset = await w.t.http.post('/api/auth/reset-password', {
      json: { newPassword: 'the victim chose this', token: res.body.data.passwordResetToken },
    });
    expect(reset.status, reset.text).toBe(200);
    return { res, victim: await signIn(w.t, { email, password: 'the victim chose this' }) };
  }

  it('completion first, then the webhook: nothing reaches the attacker; the claim link attaches the purchase after proof', async () => {
    const email = `victim-a-${Date.now()}@example.test`;
    const attacker = await attackerHolding(email);
    const { agent, sessionId, stripeSub, events } = await paidAnonymously(email);

    const res = await completeAnonymous(w, sessionId);
    expect(res.status, res.text).toBe(202);
    expect(res.body).toEqual({ status: 'success', data: { claim: 'mailed' }, error: null });
    await deliver(w, events);
    await expectNothingAttachedTo(attacker, stripeSub.id, agent.id);

    // The address (the victim's mailbox) got exactly one claim link; completing again mails no second one.
    expect((await completeAnonymous(w, sessionId)).status).toBe(202);
    const mails = await claimMailsTo(email);
    expect(mails).toHaveLength(1);
    const token = claimTokenIn(mails[0]!);
    await expectNothingAttachedTo(attacker, stripeSub.id, agent.id);

    // The victim follows the link: the purchase and the Stripe customer go to the account holding the address,
    // whose address is now verified, and whose attacker-set password and sessions are gone.
    const { res: claimed, victim } = await claimAndSetPassword(token, email);
    expect(claimed.body.data).toMatchObject({
      user: { id: attacker.userId, email },
      subscription: { agentId: agent.id, status: 'active', userId: attacker.userId },
    });
    expect((await w.t.http.get('/me', { cookie: attacker.cookie })).status).toBe(401);
    expect((await w.t.http.post('/api/auth/sign-in/email', { json: { email, password: attacker.password } })).status).toBe(401);
    const mine = await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: victim.cookie });
    expect(mine.status).toBe(200);
    expect(mine.body.data.id).toBe(claimed.body.data.subscription.id);
    expect((await w.t.http.get('/api/auth/get-session', { cookie: victim.cookie })).body.user.emailVerified).toBe(true);
    expect(await customerLinksOf(victim.userId)).toEqual([{ stripeCustomerId: stripeSub.customer }]);

    // The link works once; the success page now shows the attached purchase.
    const reused = await claim(token);
    expect(reused.status).toBe(422);
    expect(reused.body.error).toMatchObject({ code: 'INVALID_STATE', details: { reason: 'used' } });
    const again = await completeAnonymous(w, sessionId);
    expect(again.status).toBe(200);
    expect(again.body.data).toMatchObject({ created: false, subscription: { id: claimed.body.data.subscription.id } });

    // The token never reached a log line (the outbox delivery and the claim request included).
    await deliverMail(w.t);
    expect(JSON.stringify(w.t.logs)).not.toContain(token);
    expect(JSON.stringify(w.t.logs)).not.toContain(claimed.body.data.passwordResetToken);
  });

  it('webhook first, then completion, also racing: one claim, one mail, nothing on the attacker', async () => {
    const email = `victim-b-${Date.now()}@example.test`;
    const attacker = await attackerHolding(email);
    const { agent, sessionId, stripeSub, events } = await paidAnonymously(email);
    await deliver(w, events);
    await expectNothingAttachedTo(attacker, stripeSub.id, agent.id);
    expect(await claimMailsTo(email)).toHaveLength(1);
    const results = await Promise.all([completeAnonymous(w, sessionId), deliver(w, [...events].reverse()), completeAnonymous(w, sessionId)]);
    expect(results[0]!.status).toBe(202);
    expect(results[2]!.status).toBe(202);
    await expectNothingAttachedTo(attacker, stripeSub.id, agent.id);
    const mails = await claimMailsTo(email);
    expect(mails).toHaveLength(1);

    // Later events while the claim waits attach nothing either.
    await deliver(w, events.map((e) => ({ ...e, id: `${e.id}_while_pending` })));
    await expectNothingAttachedTo(attacker, stripeSub.id, agent.id);

    const { res: claimed, victim } = await claimAndSetPassword(claimTokenIn(mails[0]!), email);
    expect(claimed.body.data.subscription).toMatchObject({ agentId: agent.id, status: 'active' });
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: victim.cookie })).status).toBe(200);
    // The webhook keeps the claimed subscription up to date from now on.
    await deliver(w, events.map((e) => ({ ...e, id: `${e.id}_later` })));
    expect((await localSubscription(stripeSub.id))!.userId).toBe(victim.userId);
  });

  it('bogus, malformed and expired claim tokens are refused and attach nothing; the success page mails a fresh link', async () => {
    expect((await claim('A'.repeat(43))).status).toBe(404);
    expect((await claim('x')).status).toBe(400);
    expect((await w.t.http.post('/checkout/anonymous/claim', { json: {} })).status).toBe(400);

    const email = `victim-c-${Date.now()}@example.test`;
    const attacker = await attackerHolding(email);
    const { agent, sessionId, stripeSub } = await paidAnonymously(email);
    expect((await completeAnonymous(w, sessionId)).status).toBe(202);
    const first = claimTokenIn((await claimMailsTo(email))[0]!);
    const start = w.t.clock.now();
    try {
      w.t.clock.advance(8 * 24 * 60 * 60 * 1000);
      const expired = await claim(first);
      expect(expired.status).toBe(422);
      expect(expired.body.error).toMatchObject({ code: 'INVALID_STATE', details: { reason: 'expired' } });
      await expectNothingAttachedTo(attacker, stripeSub.id, agent.id);

      // Back on the success page, the buyer gets a new link; the old one stays dead.
      expect((await completeAnonymous(w, sessionId)).status).toBe(202);
      const mails = await claimMailsTo(email);
      expect(mails).toHaveLength(2);
      const fresh = mails.map(claimTokenIn).find((t) => t !== first)!;
      expect((await claim(first)).status).toBe(404);
      const { res } = await claimAndSetPassword(fresh, email);
      expect(res.body.data.subscription.agentId).toBe(agent.id);
    } finally {
      w.t.clock.set(start);
    }
  });

  it('attack: a claim that meets a paid subscription the account already has: the claimed one is refunded in full and canceled as a duplicate', async () => {
    // The owner never followed the verification mail (a signed-in checkout does not need it) and pays for the agent;
    // signed out, they buy it again anonymously with their own address, and get a claim link. The claim wrote the
    // subscription without the duplicate's undo, met `conflict` and left the second one charging (found by a review).
    const owner = await signUp(w.t);
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 3100 });
    const kept = await buyPaidTier(w, owner, tier.id);
    const { sessionId, stripeSub, events } = await paidAnonymously(owner.email, { agent, tier });
    expect((await completeAnonymous(w, sessionId)).status).toBe(202);
    await deliver(w, events); // recorded, nothing written: the claim is pending

    const res = await claim(claimTokenIn((await claimMailsTo(owner.email))[0]!));
    expect(res.status, res.text).toBe(200);
    // the answer shows the subscription the account keeps; the set-password step is there as for any claim
    expect(res.body.data.subscription).toMatchObject({ id: kept.subscriptionId, userId: owner.userId, status: 'active' });
    expect(typeof res.body.data.passwordResetToken).toBe('string');
    expect(w.fake.subscriptions.get(stripeSub.id)!.status).toBe('canceled');
    expect(refundsOf(stripeSub.id).map((r) => [r.amount, r.reason])).toEqual([[3100, 'duplicate']]);
    expect(w.fake.subscriptions.get(kept.stripeSubscriptionId)!.status).toBe('active');
    // Stripe's events about the cancel change nothing and refund nothing twice
    await deliver(w, w.fake.takeEvents());
    const live = await rows<{ id: string }>(
      w.t.db,
      sql`select stripe_subscription_id as id from subscriptions where user_id = ${owner.userId} and status <> 'canceled'`,
    );
    expect(live).toEqual([{ id: kept.stripeSubscriptionId }]);
    expect(refundsOf(stripeSub.id)).toHaveLength(1);
  });

  it('attack on a ban: a claim for a banned unverified account is refunded and canceled, never served', async () => {
    // An unverified account holding the address is banned (say, an attacker's pre-registration of it, banned for
    // abuse); the mailbox's owner buys anonymously and follows the claim link. The claim skipped the banned-buyer rule
    // and wrote a live subscription the banned account can never use, charged every period (found by a review).
    const email = `victim-e-${Date.now()}@example.test`;
    const held = await attackerHolding(email);
    expect((await w.t.http.post(`/admin/users/${held.userId}/ban`, { cookie: w.admin.cookie, json: {} })).status).toBe(200);
    const { agent, sessionId, stripeSub, events } = await paidAnonymously(email);
    expect((await completeAnonymous(w, sessionId)).status).toBe(202);
    await deliver(w, events);

    const res = await claim(claimTokenIn((await claimMailsTo(email))[0]!));
    expect(res.status, res.text).toBe(200);
    expect(res.body.data.subscription).toMatchObject({ userId: held.userId, agentId: agent.id, status: 'canceled' });
    expect(w.fake.subscriptions.get(stripeSub.id)!.status).toBe('canceled');
    expect(refundsOf(stripeSub.id).map((r) => r.metadata.bannedUserId)).toEqual([held.userId]);
    await deliver(w, w.fake.takeEvents());
    const access = await first<{ n: number }>(
      w.t.db,
      sql`select count(*)::int as n from subscriptions where user_id = ${held.userId} and status in ('active', 'past_due')`,
    );
    expect(access!.n).toBe(0);
  });

  it("attack: a claim ends the consents the unverified holder gave: their agent gets no silent code for the owner's account", async () => {
    // The pre-registrant consents to their own agent (all scopes) from the account holding the victim's address; the
    // victim buys anonymously and follows the claim link. The claim verified the address and ended every session and
    // token, but the consent stayed: once the owner signed in, the agent's page got a code for the owner's account with
    // prompt=none, no consent screen (review 05; public.mailbox_takes_account_back, migration 20261127000700).
    const email = `victim-f-${Date.now()}@example.test`;
    const attacker = await attackerHolding(email);
    const hostileAgent = await createOAuthClient(w.t, { name: 'Hostile agent' });
    const attackersTokens = await accessTokenFor(w.t, attacker, { client: hostileAgent });
    const { sessionId, events } = await paidAnonymously(email);
    expect((await completeAnonymous(w, sessionId)).status).toBe(202);
    await deliver(w, events);

    const res = await claim(claimTokenIn((await claimMailsTo(email))[0]!));
    expect(res.status, res.text).toBe(200);
    // The claim itself ends them, in its own transaction, before anyone follows the set-password step.
    const consents = await first<{ n: number }>(w.t.db, sql`select count(*)::int as n from "oauthConsent" where "userId" = ${attacker.userId}`);
    expect(consents!.n).toBe(0);
    expect((await w.t.http.get('/me', { bearer: attackersTokens.accessToken })).status).toBe(401);
    const refresh = await postForm(w.t, '/api/auth/oauth2/token', attackersTokens, {
      grant_type: 'refresh_token',
      refresh_token: attackersTokens.refreshToken,
    });
    expect(refresh.body.error).toBe('invalid_grant');

    const reset = await w.t.http.post('/api/auth/reset-password', {
      json: { newPassword: 'the victim chose this', token: res.body.data.passwordResetToken },
    });
    expect(reset.status, reset.text).toBe(200);
    const owner = await signIn(w.t, { email, password: 'the victim chose this' });
    const landing = await followAuthorize(w.t, `${authorizeUrl(hostileAgent, { challenge: pkcePair().challenge })}&prompt=none`, owner.cookie);
    expect(landing.searchParams.get('code'), landing.href).toBeNull();
    expect(landing.searchParams.get('error')).toBe('consent_required');
  });

  it('stores only a hash of the claim token, in a table with row level security and no anonymous access', async () => {
    const email = `victim-d-${Date.now()}@example.test`;
    await attackerHolding(email);
    const { sessionId } = await paidAnonymously(email);
    expect((await completeAnonymous(w, sessionId)).status).toBe(202);
    const token = claimTokenIn((await claimMailsTo(email))[0]!);
    const stored = await rows<Record<string, unknown>>(w.t.db, sql`select * from purchase_claims where email = ${email}`);
    expect(stored).toHaveLength(1);
    expect(JSON.stringify(stored)).not.toContain(token);
    const [table] = await rows<{ rls: boolean; anon: boolean }>(
      w.t.db,
      sql`select c.relrowsecurity as rls, has_table_privilege('anon', c.oid, 'select') as anon
            from pg_class c where c.oid = 'public.purchase_claims'::regclass`,
    );
    expect(table).toEqual({ rls: true, anon: false });
  });

  it('without FRONTEND_URL the link opens the service\'s own claim page', async () => {
    const page = await w.t.http.get('/claim?token=abc');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(page.text).toContain('/checkout/anonymous/claim');
    expect(page.headers.get('referrer-policy')).toBe('no-referrer');
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
