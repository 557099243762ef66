import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ANONYMOUS_CHECKOUTS_PER_DAY,
  CANCELS_PER_ADDRESS_PER_DAY,
  CANCELS_PER_DAY,
  CHECKOUT_READS_PER_ADDRESS_PER_DAY,
  CHECKOUT_READS_PER_DAY,
  CHECKOUTS_PER_ADDRESS_PER_DAY,
  CHECKOUTS_PER_DAY,
  PORTAL_SESSIONS_PER_ADDRESS_PER_DAY,
  PORTAL_SESSIONS_PER_DAY,
} from '../../functions/billing/allowances.ts';
import { first, sql } from '../../functions/platform/db.ts';
import { insertTier } from '../support/fixtures.ts';
import { browserGet } from '../support/http.ts';
import { accessTokenFor, createFirstPartyClient } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { activeAgent, buyPaidTier, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * The daily allowances of what reaches Stripe or writes a subscription (functions/billing/allowances.ts), against the
 * ways around them reviews found: an agent's token spending the allowance the user needs everywhere else (with
 * requests it may make, or ones refused 403), the anonymous checkout as a second door, checkout-session reads, and
 * throwaway accounts from one address (review 33).
 * The plain case (a user scripting checkouts and portal sessions) is in checkout.test.ts.
 */

let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

describe("an agent's token has an allowance of its own for the user, and spends none on refused requests", () => {
  it("attack: agent X's backend starts X's checkouts until its own allowance ends; the user still buys Y's tier, agent Y's token too", async () => {
    const x = await activeAgent(w);
    const xPaid = await paidTier(w, x.id);
    const y = await activeAgent(w);
    const yFree = await insertTier(w.t.db, y.id, { priceCents: 0 });
    const user = await signUp(w.t);
    const tokenX = (await accessTokenFor(w.t, user, { agentId: x.id })).accessToken;

    for (let i = 0; i < CHECKOUTS_PER_DAY; i++) {
      const started = await w.t.http.post('/me/checkout', { bearer: tokenX, json: { tierId: xPaid.id } });
      expect(started.status, started.text).toBe(200);
    }
    const sessionsBefore = w.fake.sessions.size;
    const past = await w.t.http.post('/me/checkout', { bearer: tokenX, json: { tierId: xPaid.id } });
    expect([past.status, past.body.error?.code]).toEqual([429, 'RATE_LIMITED']);
    expect(w.fake.sessions.size).toBe(sessionsBefore);

    const mine = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: yFree.id } });
    expect(mine.status, mine.text).toBe(201);
  });

  it("attack: agent X's backend opens its cancel portal until its allowance ends; the user still opens their billing portal", async () => {
    const x = await activeAgent(w);
    const xPaid = await paidTier(w, x.id);
    const user = await signUp(w.t);
    await buyPaidTier(w, user, xPaid.id);
    const tokenX = (await accessTokenFor(w.t, user, { agentId: x.id })).accessToken;

    for (let i = 0; i < PORTAL_SESSIONS_PER_DAY; i++) {
      const opened = await w.t.http.post('/me/billing-portal', { bearer: tokenX, json: { flow: 'cancel', agentId: x.id } });
      expect(opened.status, opened.text).toBe(200);
    }
    expect((await w.t.http.post('/me/billing-portal', { bearer: tokenX, json: { flow: 'cancel', agentId: x.id } })).status).toBe(429);
    const mine = await w.t.http.post('/me/billing-portal', { cookie: user.cookie, json: { flow: 'overview' } });
    expect(mine.status, mine.text).toBe(200);
  });

  it("attack: agent X's token asking for agent Y's tier (403 each time) spends nothing, not even its own allowance", async () => {
    const x = await activeAgent(w);
    const xFree = await insertTier(w.t.db, x.id, { priceCents: 0 });
    const y = await activeAgent(w);
    const yFree = await insertTier(w.t.db, y.id, { priceCents: 0 });
    const user = await signUp(w.t);
    const tokenX = (await accessTokenFor(w.t, user, { agentId: x.id })).accessToken;

    for (let i = 0; i < CHECKOUTS_PER_DAY + 5; i++) {
      const refused = await w.t.http.post('/me/checkout', { bearer: tokenX, json: { tierId: yFree.id } });
      expect([refused.status, refused.body.error?.code]).toEqual([403, 'FORBIDDEN']);
    }
    const own = await w.t.http.post('/me/checkout', { bearer: tokenX, json: { tierId: xFree.id } });
    expect(own.status, own.text).toBe(201);
    const mine = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: yFree.id } });
    expect(mine.status, mine.text).toBe(201);
    expect(mine.body.data.subscription).toMatchObject({ userId: user.userId, agentId: y.id, tierId: yFree.id });
  });
});

describe('a checkout refused before it makes anything spends nothing (review 97)', () => {
  it(`a user's ${CHECKOUTS_PER_DAY} refused or idle checkouts (422 already paying, 400 a foreign return URL, 409 another tier held, the free tier held already) leave the day's allowance whole`, async () => {
    const x = await activeAgent(w);
    const xPaid = await paidTier(w, x.id);
    const y = await activeAgent(w);
    const yPaid = await paidTier(w, y.id);
    const z = await activeAgent(w);
    const zFreeA = await insertTier(w.t.db, z.id, { priceCents: 0 });
    const zFreeB = await insertTier(w.t.db, z.id, { priceCents: 0 });
    const other = await activeAgent(w);
    const otherFree = await insertTier(w.t.db, other.id, { priceCents: 0 });
    const user = await signUp(w.t);
    await buyPaidTier(w, user, xPaid.id); // takes one
    expect((await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: zFreeA.id } })).status).toBe(201); // takes one

    const attempts = [
      { json: { tierId: xPaid.id }, answer: [422, 'INVALID_STATE'] },
      { json: { tierId: yPaid.id, successUrl: 'https://elsewhere.example/thanks' }, answer: [400, 'VALIDATION_ERROR'] },
      { json: { tierId: zFreeB.id }, answer: [409, 'CONFLICT'] },
      { json: { tierId: zFreeA.id }, answer: [201, undefined] }, // the subscription already held, answered again
    ];
    const sessionsBefore = w.fake.sessions.size;
    for (let i = 0; i < CHECKOUTS_PER_DAY; i++) {
      const { json, answer } = attempts[i % attempts.length]!;
      const res = await w.t.http.post('/me/checkout', { cookie: user.cookie, json });
      expect([res.status, res.body.error?.code], res.text).toEqual(answer);
    }
    expect(w.fake.sessions.size).toBe(sessionsBefore); // Stripe was never asked
    // What the day counts: the two starts that made something, none of the fifty (each kind on its own, too).
    const counted = await first<{ hits: number }>(w.t.db, sql`select hits from public.rate_limits where key = ${`billing-checkout|${user.userId}|own`}`);
    expect(counted?.hits).toBe(2);
    const started = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: otherFree.id } });
    expect(started.status, started.text).toBe(201);
  });
});

describe('checkout-session reads', () => {
  it(`attack: reading made-up, anonymous or other users' checkout sessions asks Stripe nothing and spends nothing; one's own read in a loop stops reaching Stripe after ${CHECKOUT_READS_PER_DAY} a day`, async () => {
    // The read asked Stripe before it could tell whose session it was: each made-up id cost the marketplace's shared
    // Stripe rate limit a call and one of the user's reads (found by a review). Now the sessions we made are recorded
    // with their buyer (migration 20261127004400), and only the buyer's own are read at Stripe, and counted.
    const user = await signUp(w.t);
    const other = await signUp(w.t);
    const tier = await paidTier(w, (await activeAgent(w)).id);
    const othersSession = await w.t.http.post('/me/checkout', { cookie: other.cookie, json: { tierId: tier.id } });
    expect(othersSession.status, othersSession.text).toBe(200);
    const anonymousSession = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    expect(anonymousSession.status, anonymousSession.text).toBe(200);
    const reads = () => w.fake.requests.filter((r) => r.method === 'GET' && r.path.startsWith('/v1/checkout/sessions/')).length;
    const before = reads();
    const notMine = [othersSession.body.data.sessionId, anonymousSession.body.data.sessionId];
    const refused = new Set<string>();
    for (let i = 0; i < CHECKOUT_READS_PER_DAY + 10; i++) {
      const id = i < notMine.length ? notMine[i] : `cs_test_${randomBytes(12).toString('hex')}`;
      const res = await w.t.http.get(`/me/checkout/${id}`, { cookie: user.cookie });
      refused.add(`${res.status} ${res.body.error?.code}`);
    }
    expect({ refused: [...refused], stripeReads: reads() - before }).toEqual({ refused: ['404 NOT_FOUND'], stripeReads: 0 });

    const mine = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
    expect(mine.status, mine.text).toBe(200);
    const statuses: number[] = [];
    for (let i = 0; i < CHECKOUT_READS_PER_DAY + 10; i++) {
      statuses.push((await w.t.http.get(`/me/checkout/${mine.body.data.sessionId}`, { cookie: user.cookie })).status);
    }
    expect(statuses.slice(0, CHECKOUT_READS_PER_DAY).every((s) => s === 200)).toBe(true);
    expect(statuses.slice(CHECKOUT_READS_PER_DAY).every((s) => s === 429)).toBe(true);
    expect(reads() - before).toBe(CHECKOUT_READS_PER_DAY);
  });

  it('attack: another site navigates a popup through the built-in success page with made-up session ids; its same-origin reads spend nothing, the user\'s own success page still reads their checkout', async () => {
    // The page at /checkout/success?session_id=... reads the id with a same-origin fetch on load, which is the
    // user's own doing by its fetch metadata (rule 29 cannot refuse it: Stripe's redirect to the page is a cross-site
    // navigation too). A page the user opened navigated a popup through it again and again, each load one of the
    // user's reads and a Stripe read, until their own success page was refused 429 for the day.
    const user = await signUp(w.t);
    const tier = await paidTier(w, (await activeAgent(w)).id);
    const reads = () => w.fake.requests.filter((r) => r.method === 'GET' && r.path.startsWith('/v1/checkout/sessions/')).length;
    const before = reads();
    const navigation = { cookie: user.cookie, 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' };
    const pageRead = { cookie: user.cookie, 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty' };
    const answers = new Set<string>();
    for (let i = 0; i < CHECKOUT_READS_PER_DAY + 5; i++) {
      const id = `cs_test_${randomBytes(12).toString('hex')}`;
      const page = await browserGet(w.t.baseUrl, `/checkout/success?session_id=${id}`, navigation);
      expect(page.status).toBe(200);
      const res = await browserGet(w.t.baseUrl, `/me/checkout/${id}`, pageRead);
      answers.add(`${res.status} ${JSON.parse(res.text).error?.code}`);
    }
    expect({ answers: [...answers], stripeReads: reads() - before }).toEqual({ answers: ['404 NOT_FOUND'], stripeReads: 0 });

    const started = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
    expect(started.status, started.text).toBe(200);
    const own = await browserGet(w.t.baseUrl, `/me/checkout/${started.body.data.sessionId}`, pageRead);
    expect(own.status, own.text).toBe(200);
    expect(JSON.parse(own.text).data.sessionId).toBe(started.body.data.sessionId);
  });

  it("attack: agent X's backend knows the checkout it started for the user and has the user's browser read it all day; the user's reads of other agents' checkouts are untouched", async () => {
    const x = await activeAgent(w);
    const xTier = await paidTier(w, x.id);
    const y = await activeAgent(w);
    const yTier = await paidTier(w, y.id);
    const user = await signUp(w.t);
    const tokenX = (await accessTokenFor(w.t, user, { agentId: x.id })).accessToken;
    const byX = await w.t.http.post('/me/checkout', { bearer: tokenX, json: { tierId: xTier.id } });
    expect(byX.status, byX.text).toBe(200);
    const ownY = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: yTier.id } });
    expect(ownY.status, ownY.text).toBe(200);
    // X's token may not read the user's checkout of Y (and spends nothing trying).
    expect((await w.t.http.get(`/me/checkout/${ownY.body.data.sessionId}`, { bearer: tokenX })).status).toBe(403);

    const pageRead = { cookie: user.cookie, 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty' };
    const statuses: number[] = [];
    for (let i = 0; i < CHECKOUT_READS_PER_DAY + 3; i++) {
      statuses.push((await browserGet(w.t.baseUrl, `/me/checkout/${byX.body.data.sessionId}`, pageRead)).status);
    }
    expect(statuses.slice(CHECKOUT_READS_PER_DAY)).toEqual([429, 429, 429]);
    const y1 = await browserGet(w.t.baseUrl, `/me/checkout/${ownY.body.data.sessionId}`, pageRead);
    expect(y1.status, y1.text).toBe(200);
  });

  it(`attack: another site's page loads /me/checkout/... ${CHECKOUT_READS_PER_DAY} times with the user's cookie; nothing is spent, Stripe is not asked, the user's own read still works`, async () => {
    // Review 24: the session cookie is SameSite=None in production, so `<img src="{api}/me/checkout/cs_x">` on any
    // page the user opened was sent with it, spent one of the day's reads and made a Stripe read each; then the
    // user's own success page was refused 429 until the next day. A popup the page navigates again and again without
    // a click did the same (a top-level navigation of the API from another site is not the user's either).
    const user = await signUp(w.t);
    const tier = await paidTier(w, (await activeAgent(w)).id);
    const started = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
    expect(started.status, started.text).toBe(200);
    const reads = () => w.fake.requests.filter((r) => r.method === 'GET' && r.path.startsWith('/v1/checkout/sessions/')).length;
    const before = reads();
    const fromElsewhere = { cookie: user.cookie, 'sec-fetch-site': 'cross-site', referer: 'https://evil.example/page' };
    const image = { ...fromElsewhere, 'sec-fetch-mode': 'no-cors', 'sec-fetch-dest': 'image' };
    const navigation = { ...fromElsewhere, 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' };
    const answers = new Set<string>();
    for (let i = 0; i < CHECKOUT_READS_PER_DAY; i++) {
      const res = await browserGet(w.t.baseUrl, `/me/checkout/cs_test_${randomBytes(12).toString('hex')}`, i % 2 ? navigation : image);
      const error = JSON.parse(res.text).error;
      answers.add(`${res.status} ${error?.code} ${error?.details?.reason}`);
    }
    expect({ answers: [...answers], stripeReads: reads() - before }).toEqual({ answers: ['403 FORBIDDEN cross_site'], stripeReads: 0 });

    // The user's own success page (same origin) reads their checkout session, with the day's reads untouched.
    const own = await browserGet(w.t.baseUrl, `/me/checkout/${started.body.data.sessionId}`, {
      cookie: user.cookie,
      'sec-fetch-site': 'same-origin',
      'sec-fetch-mode': 'cors',
      'sec-fetch-dest': 'empty',
    });
    expect(own.status, own.text).toBe(200);
    expect(JSON.parse(own.text).data.sessionId).toBe(started.body.data.sessionId);
  });
});

describe('the anonymous checkout is no way around the daily bound', () => {
  const PER_MINUTE = 30; // the production default of AUTH_RATE_LIMIT_PER_MINUTE (tests run with 0: no limit)
  let limited: BillingWorld;
  beforeAll(async () => {
    limited = await startBillingWorld({ env: { AUTH_RATE_LIMIT_PER_MINUTE: String(PER_MINUTE) } });
  });
  afterAll(() => limited.close());

  it(`attack: one address makes at most ${ANONYMOUS_CHECKOUTS_PER_DAY} Checkout Sessions a day without an account, a minute's worth at a time`, async () => {
    // With only the per-minute limit, one address made 43,200 sessions a day at Stripe (found by a review).
    const tier = await paidTier(limited, (await activeAgent(limited)).id);
    const before = limited.fake.sessions.size;
    const statuses: number[] = [];
    for (let i = 0; i < ANONYMOUS_CHECKOUTS_PER_DAY + 20; i++) {
      if (i % PER_MINUTE === 0) limited.t.clock.advance(61_000);
      statuses.push((await limited.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } })).status);
    }
    expect(limited.fake.sessions.size - before).toBe(ANONYMOUS_CHECKOUTS_PER_DAY);
    expect(statuses.slice(ANONYMOUS_CHECKOUTS_PER_DAY)).toEqual(Array(20).fill(429));
  });
});

describe('one address, many accounts (review 33)', () => {
  // Accounts cost nothing (sign-up needs no verified address), so a script moving to a fresh account whenever one's
  // day was used up made Stripe objects and reads without end from one address: three throwaway accounts made 150
  // Checkout Sessions. Requests with users' own credentials (cookie, first-party token) are now counted per client
  // address too; an agent backend's, with its users' tokens, are not (its address is shared by all the agent's users).
  // The app believes X-Forwarded-For from the test's loopback proxy.
  let p: BillingWorld;
  beforeAll(async () => {
    p = await startBillingWorld({ env: { TRUSTED_PROXIES: '127.0.0.1, ::1' } });
  });
  afterAll(() => p.close());
  const from = (ip: string) => ({ 'x-forwarded-for': ip });
  type Auth = { cookie: string } | { bearer: string };

  it(`attack: fresh accounts from one address start at most ${CHECKOUTS_PER_ADDRESS_PER_DAY} Checkout Sessions a day; another address, and an agent's backend with its users' tokens, are not held back`, async () => {
    const agent = await activeAgent(p);
    const tier = await paidTier(p, agent.id);
    const checkout = (auth: Auth, ip: string) => p.t.http.post('/me/checkout', { ...auth, headers: from(ip), json: { tierId: tier.id } });
    const sessionsBefore = p.fake.sessions.size;

    // The agent's backend at 203.0.113.30, for two of its users: not counted against the address.
    const backend: string[] = [];
    for (let u = 0; u < 2; u++) backend.push((await accessTokenFor(p.t, await signUp(p.t), { agentId: agent.id })).accessToken);
    for (const bearer of backend) {
      for (let i = 0; i < 5; i++) expect((await checkout({ bearer }, '203.0.113.30')).status).toBe(200);
    }

    // Throwaway accounts at the same address, the first with the marketplace's first-party token, the others their
    // cookie: all the address's day is theirs, and no more.
    const firstParty = await createFirstPartyClient(p.t);
    for (let a = 0; a < CHECKOUTS_PER_ADDRESS_PER_DAY / CHECKOUTS_PER_DAY; a++) {
      const account = await signUp(p.t);
      const auth = a === 0 ? { bearer: (await accessTokenFor(p.t, account, { client: firstParty })).accessToken } : { cookie: account.cookie };
      for (let i = 0; i < CHECKOUTS_PER_DAY; i++) expect((await checkout(auth, '203.0.113.30')).status).toBe(200);
    }
    const late = await signUp(p.t);
    const made = p.fake.sessions.size;
    const refused = await checkout({ cookie: late.cookie }, '203.0.113.30');
    expect([refused.status, refused.body.error.code, refused.body.error.details.limitPerDay]).toEqual([429, 'RATE_LIMITED', CHECKOUTS_PER_ADDRESS_PER_DAY]);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(p.fake.sessions.size).toBe(made);

    // The agent's backend is still served at that address; the late account is, from another address.
    for (const bearer of backend) expect((await checkout({ bearer }, '203.0.113.30')).status).toBe(200);
    expect((await checkout({ cookie: late.cookie }, '198.51.100.30')).status).toBe(200);
    expect(p.fake.sessions.size - sessionsBefore).toBe(backend.length * 6 + CHECKOUTS_PER_ADDRESS_PER_DAY + 1);
  });

  const reads = () => p.fake.requests.filter((r) => r.method === 'GET' && r.path.startsWith('/v1/checkout/sessions/')).length;
  const kinds = [
    {
      what: 'billing-portal sessions',
      perUser: PORTAL_SESSIONS_PER_DAY,
      perAddress: PORTAL_SESSIONS_PER_ADDRESS_PER_DAY,
      ask: (b: Buyer, ip: string) => p.t.http.post('/me/billing-portal', { cookie: b.user.cookie, headers: from(ip), json: { flow: 'overview' } }),
      atStripe: () => p.fake.portalSessions.size,
    },
    {
      what: 'paid cancels',
      perUser: CANCELS_PER_DAY,
      perAddress: CANCELS_PER_ADDRESS_PER_DAY,
      ask: (b: Buyer, ip: string) => p.t.http.post(`/me/subscriptions/${b.agentId}/cancel`, { cookie: b.user.cookie, headers: from(ip) }),
      atStripe: () => p.fake.requests.length,
    },
    {
      what: 'checkout-session reads',
      perUser: CHECKOUT_READS_PER_DAY,
      perAddress: CHECKOUT_READS_PER_ADDRESS_PER_DAY,
      ask: (b: Buyer, ip: string) => p.t.http.get(`/me/checkout/${b.sessionId}`, { cookie: b.user.cookie, headers: from(ip) }),
      atStripe: reads,
    },
  ];
  interface Buyer {
    user: TestUser;
    agentId: string;
    sessionId: string;
  }
  /** A fresh account with a paid subscription (bought from the loopback address, not the one under test). */
  async function buyer(): Promise<Buyer> {
    const agent = await activeAgent(p);
    const user = await signUp(p.t);
    const { sessionId } = await buyPaidTier(p, user, (await paidTier(p, agent.id)).id);
    return { user, agentId: agent.id, sessionId };
  }

  kinds.forEach(({ what, perUser, perAddress, ask, atStripe }, n) => {
    it(`attack: fresh accounts from one address stop at the address's ${perAddress} ${what} a day, and nothing more reaches Stripe; another address is not held back`, async () => {
      const ip = `203.0.113.${40 + n}`;
      for (let a = 0; a < perAddress / perUser; a++) {
        const account = await buyer();
        const statuses = new Set<number>();
        for (let i = 0; i < perUser; i++) statuses.add((await ask(account, ip)).status);
        expect([...statuses]).toEqual([200]);
      }
      const late = await buyer();
      const before = atStripe();
      const refused = await ask(late, ip);
      expect([refused.status, refused.body.error.code, refused.body.error.details.limitPerDay]).toEqual([429, 'RATE_LIMITED', perAddress]);
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(atStripe()).toBe(before);
      expect((await ask(late, '198.51.100.40')).status).toBe(200);
    });
  });
});
