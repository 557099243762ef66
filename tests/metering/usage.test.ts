import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, postForm } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { agentToken, ledgerAgreesWithCounters, meter, meteredAgent, reqId, setQuota, subscribe, usagePath } from './support.ts';

/**
 * /me/usage over HTTP: increment and decrement as the agent backend makes them (the user's bearer token of the
 * agent's own client: the only credential usage writes take), reads with the user's cookie, and their errors.
 */

let t: TestApp;
let user: TestUser;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-03-10T12:00:00.000Z' });
  user = await signUp(t);
});
afterAll(() => t.close());

const increment = (u: TestUser, agentId: string, slug: string, body: Record<string, unknown>) => meter(t, u, agentId, slug, 'increment', body);
const decrement = (u: TestUser, agentId: string, slug: string, body: Record<string, unknown> = {}) => meter(t, u, agentId, slug, 'decrement', body);

describe('incrementUsage', () => {
  it('counts, answers the usage record with replayed: false and the quota headers', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'api-calls', kind: 'rolling', quota: 5 }]);
    const sub = await subscribe(t, user.userId, a.tierId);
    const res = await increment(user, a.agentId, 'api-calls', { clientReqId: reqId(), amount: 2 });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      status: 'success',
      error: null,
      data: {
        metric: 'api-calls',
        kind: 'rolling',
        used: 2,
        limit: 5,
        reserved: 0,
        remaining: 3,
        periodStart: sub.currentPeriodStart,
        periodEnd: sub.currentPeriodEnd,
        replayed: false,
      },
    });
    expect(res.headers.get('x-quota-limit')).toBe('5');
    expect(res.headers.get('x-quota-remaining')).toBe('3');
    const again = await increment(user, a.agentId, 'api-calls', { clientReqId: reqId() });
    expect(again.body.data).toMatchObject({ used: 3, remaining: 2, replayed: false });
  });

  it('replays a clientReqId: the stored result, replayed: true, nothing counted again', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const sub = await subscribe(t, user.userId, a.tierId);
    const key = reqId();
    const first = await increment(user, a.agentId, 'calls', { clientReqId: key, amount: 3 });
    await increment(user, a.agentId, 'calls', { clientReqId: reqId() });
    const replay = await increment(user, a.agentId, 'calls', { clientReqId: key, amount: 3 });
    expect(replay.status).toBe(200);
    expect(replay.body.data).toEqual({ ...first.body.data, replayed: true });
    // the headers are the stored result's (remaining 7, as the first call saw it, not 6 now) and say so
    expect([first.headers.get('x-idempotent-replay'), replay.headers.get('x-idempotent-replay')]).toEqual([null, 'true']);
    expect(replay.headers.get('x-quota-remaining')).toBe('7');
    const usage = await t.http.get(usagePath(a.agentId, 'calls'), { cookie: user.cookie });
    expect(usage.body.data.used).toBe(4);
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 4, sum: 4 }]);
  });

  it('answers 429 QUOTA_EXCEEDED with details and counts nothing; the replay of a 429 stays a 429 after an addon raised the limit', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 2 }]);
    const sub = await subscribe(t, user.userId, a.tierId);
    const admin = await createAdmin(t);
    await increment(user, a.agentId, 'calls', { clientReqId: reqId(), amount: 2 });
    const key = reqId();
    const denied = await increment(user, a.agentId, 'calls', { clientReqId: key });
    expect(denied.status).toBe(429);
    expect(denied.body).toMatchObject({
      status: 'error',
      data: null,
      error: { code: 'QUOTA_EXCEEDED', details: { metric: 'calls', used: 2, limit: 2, requested: 1, periodEnd: sub.currentPeriodEnd } },
    });
    expect(denied.body.error.message).toContain(`resets at ${sub.currentPeriodEnd}`);
    expect(denied.headers.get('x-quota-remaining')).toBe('0');
    // a rolling quota resets at a known time: Retry-After counts the seconds to it (the test clock stands still)
    const untilReset = (Date.parse(sub.currentPeriodEnd) - Date.parse('2026-03-10T12:00:00.000Z')) / 1000;
    expect(denied.headers.get('retry-after')).toBe(String(untilReset));

    const grant = await t.http.post(`/admin/subscriptions/${sub.id}/addons`, {
      cookie: admin.cookie,
      json: { metricSlug: 'calls', amount: 5, duration: 'permanent' },
    });
    expect(grant.status).toBe(201);
    const replay = await increment(user, a.agentId, 'calls', { clientReqId: key });
    expect(replay.status).toBe(429);
    expect(replay.body.error.details).toMatchObject({ metric: 'calls', used: 2, limit: 2, requested: 1, replayed: true });
    // a new clientReqId is evaluated afresh against the raised limit
    const fresh = await increment(user, a.agentId, 'calls', { clientReqId: reqId() });
    expect(fresh.status).toBe(200);
    expect(fresh.body.data).toMatchObject({ used: 3, limit: 7, remaining: 4 });
  });

  it('admits an increment that lands exactly on the limit and refuses one unit more', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'seats', kind: 'fixed', quota: 3 }]);
    await subscribe(t, user.userId, a.tierId);
    expect((await increment(user, a.agentId, 'seats', { clientReqId: reqId(), amount: 4 })).status).toBe(429);
    expect((await increment(user, a.agentId, 'seats', { clientReqId: reqId(), amount: 3 })).status).toBe(200);
    const over = await increment(user, a.agentId, 'seats', { clientReqId: reqId() });
    expect(over.status).toBe(429);
    expect(over.body.error.details).toMatchObject({ metric: 'seats', used: 3, reserved: 0, limit: 3, requested: 1, periodEnd: null, replayed: false });
    // a fixed metric never resets by itself: no Retry-After, and the message says what frees units
    expect(over.headers.get('retry-after')).toBeNull();
    expect(over.body.error.message).toContain('does not reset by itself');
  });

  it('treats a null tier quota as unlimited, 0 as deny, and a missing quota row as deny', async () => {
    const a = await meteredAgent(t.db, [
      { slug: 'unlimited', kind: 'rolling', quota: null },
      { slug: 'zero', kind: 'rolling', quota: 0 },
      { slug: 'missing', kind: 'fixed', quota: 'none' },
    ]);
    await subscribe(t, user.userId, a.tierId);
    const big = await increment(user, a.agentId, 'unlimited', { clientReqId: reqId(), amount: 1_000_000 });
    expect(big.status).toBe(200);
    expect(big.body.data).toMatchObject({ used: 1_000_000, limit: null, remaining: null });
    expect(big.headers.get('x-quota-limit')).toBe('unlimited');
    expect(big.headers.get('x-quota-remaining')).toBe('unlimited');
    const zero = await increment(user, a.agentId, 'zero', { clientReqId: reqId() });
    expect(zero.status).toBe(429);
    expect(zero.body.error.details).toMatchObject({ used: 0, limit: 0 });
    const missing = await increment(user, a.agentId, 'missing', { clientReqId: reqId() });
    expect(missing.status).toBe(429);
    expect(missing.body.error.details).toMatchObject({ used: 0, limit: 0 });
  });

  it('answers 402 SUBSCRIPTION_REQUIRED without an active subscription (none, or canceled)', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    const other = await signUp(t);
    const none = await increment(other, a.agentId, 'calls', { clientReqId: reqId() });
    expect(none.status).toBe(402);
    expect(none.body.error.code).toBe('SUBSCRIPTION_REQUIRED');
    const sub = await subscribe(t, other.userId, a.tierId);
    await sql`update subscriptions set status = 'canceled' where id = ${sub.id}`.execute(t.db);
    expect((await increment(other, a.agentId, 'calls', { clientReqId: reqId() })).status).toBe(402);
    const [{ n }] = (await sql<{ n: number }>`select count(*)::int as n from quota_ledger where subscription_id = ${sub.id}`.execute(t.db)).rows as [{ n: number }];
    expect(n).toBe(0);
  });

  it('answers 404 for an unknown metric slug (and for a metric of another agent)', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    const b = await meteredAgent(t.db, [{ slug: 'other-metric', kind: 'rolling', quota: 5 }]);
    const sub = await subscribe(t, user.userId, a.tierId);
    const res = await increment(user, a.agentId, 'nope', { clientReqId: reqId() });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('NOT_FOUND');
    expect((await increment(user, a.agentId, 'other-metric', { clientReqId: reqId() })).status).toBe(404);
    // nothing was counted: not on this subscription, and not on the other agent's metric of that name
    const { rows } = await sql<{ subscription: number; other: number }>`
      select (select count(*)::int from quota_ledger where subscription_id = ${sub.id}) +
             (select count(*)::int from usage_counters where subscription_id = ${sub.id}) as subscription,
             (select count(*)::int from quota_ledger where metric_id = ${b.metrics['other-metric']!}) +
             (select count(*)::int from usage_counters where metric_id = ${b.metrics['other-metric']!}) as other`.execute(t.db);
    expect(rows[0]).toEqual({ subscription: 0, other: 0 });
  });

  it('refuses bad input with 400 and changes nothing', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    await subscribe(t, user.userId, a.tierId);
    for (const body of [{}, { clientReqId: '' }, { clientReqId: 'x'.repeat(256) }, { clientReqId: 'k', amount: 0 }, { clientReqId: 'k', amount: 1.5 }, { clientReqId: 'k', amount: '2' }]) {
      const res = await increment(user, a.agentId, 'calls', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe('VALIDATION_ERROR');
    }
    const bearer = await agentToken(t, user, a.agentId);
    expect((await t.http.post(usagePath('not-a-uuid', 'calls', 'increment'), { bearer, json: { clientReqId: 'k' } })).status).toBe(400);
    const usage = await t.http.get(usagePath(a.agentId, 'calls'), { cookie: user.cookie });
    expect(usage.body.data.used).toBe(0);
  });

  it('answers 409 IDEMPOTENCY_CONFLICT when a clientReqId of a decrement is reused for an increment, and changes nothing', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'sites', kind: 'fixed', quota: 5 }]);
    await subscribe(t, user.userId, a.tierId);
    const key = reqId();
    expect((await increment(user, a.agentId, 'sites', { clientReqId: reqId(), amount: 2 })).status).toBe(200);
    expect((await decrement(user, a.agentId, 'sites', { clientReqId: key })).status).toBe(200);
    const res = await increment(user, a.agentId, 'sites', { clientReqId: key });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('IDEMPOTENCY_CONFLICT');
    expect(res.body.error.details.original).toMatchObject({ operation: 'decrement', amount: 1 });
    expect((await t.http.get(usagePath(a.agentId, 'sites'), { cookie: user.cookie })).body.data.used).toBe(1);
  });

  it('requires a signed-in caller (401 with sign-in links)', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    const res = await t.http.post(usagePath(a.agentId, 'calls', 'increment'), { json: { clientReqId: reqId() } });
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('UNAUTHORIZED');
    expect(res.body.error.details.signInUrl).toEqual(expect.any(String));
    expect((await t.http.post(usagePath(a.agentId, 'calls', 'decrement'), { json: {} })).status).toBe(401);
    expect((await t.http.get(usagePath(a.agentId))).status).toBe(401);
    expect((await t.http.get(usagePath(a.agentId, 'calls'))).status).toBe(401);
  });

  it("counts on the caller's own subscription only: another user's usage is neither visible nor moved", async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    const alice = await signUp(t);
    const bob = await signUp(t);
    await subscribe(t, alice.userId, a.tierId);
    await increment(alice, a.agentId, 'calls', { clientReqId: 'shared-key', amount: 4 });
    // bob has no subscription: his calls are refused and alice's counter does not move
    expect((await increment(bob, a.agentId, 'calls', { clientReqId: 'shared-key' })).status).toBe(402);
    expect((await t.http.get(usagePath(a.agentId), { cookie: bob.cookie })).status).toBe(404);
    await subscribe(t, bob.userId, a.tierId);
    const bobs = await increment(bob, a.agentId, 'calls', { clientReqId: 'shared-key' });
    expect(bobs.body.data).toMatchObject({ used: 1, replayed: false });
    expect((await t.http.get(usagePath(a.agentId, 'calls'), { cookie: alice.cookie })).body.data.used).toBe(4);
  });
});

describe('bearer access tokens (agent backends)', () => {
  it("counts with the user's OAuth access token and reads usage with it", async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    const u = await signUp(t);
    await subscribe(t, u.userId, a.tierId);
    const { accessToken } = await accessTokenFor(t, u, { agentId: a.agentId });
    const res = await t.http.post(usagePath(a.agentId, 'calls', 'increment'), { bearer: accessToken, json: { clientReqId: reqId(), amount: 2 } });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ used: 2, remaining: 3, replayed: false });
    const dec = await t.http.post(usagePath(a.agentId, 'calls', 'decrement'), { bearer: accessToken, json: {} });
    expect(dec.status).toBe(422);
    expect((await t.http.get(usagePath(a.agentId), { bearer: accessToken })).body.data[0]).toMatchObject({ metric: 'calls', used: 2 });
    expect((await t.http.get(usagePath(a.agentId, 'calls'), { bearer: accessToken })).body.data.used).toBe(2);
  });

  it('refuses a malformed or revoked access token with 401 and counts nothing', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    const u = await signUp(t);
    await subscribe(t, u.userId, a.tierId);
    const tokens = await accessTokenFor(t, u, { agentId: a.agentId });
    const bad = await t.http.post(usagePath(a.agentId, 'calls', 'increment'), { bearer: `${tokens.accessToken}x`, json: { clientReqId: reqId() } });
    expect(bad.status).toBe(401);
    const revoked = await postForm(t, '/api/auth/oauth2/revoke', tokens, { token: tokens.accessToken, token_type_hint: 'access_token' });
    expect(revoked.status).toBe(200);
    const after = await t.http.post(usagePath(a.agentId, 'calls', 'increment'), { bearer: tokens.accessToken, json: { clientReqId: reqId() } });
    expect(after.status).toBe(401);
    expect(after.body.error.code).toBe('UNAUTHORIZED');
    expect((await t.http.get(usagePath(a.agentId, 'calls'), { cookie: u.cookie })).body.data.used).toBe(0);
  });

  // The bearer increment/decrement checks its caller inside the usage statement (one round trip): the same
  // rules as every other route, seen from outside.
  it("refuses a banned or deleted user's token with 401 on increment and decrement, and counts nothing", async () => {
    const a = await meteredAgent(t.db, [{ slug: 'sites', kind: 'fixed', quota: 5 }]);
    const u = await signUp(t);
    await subscribe(t, u.userId, a.tierId);
    const { accessToken } = await accessTokenFor(t, u, { agentId: a.agentId });
    const call = (op: 'increment' | 'decrement') =>
      t.http.post(usagePath(a.agentId, 'sites', op), { bearer: accessToken, json: { clientReqId: reqId() } });
    expect((await call('increment')).status).toBe(200);

    const requestId = `bearer-log-${reqId()}`;
    await t.http.post(usagePath(a.agentId, 'sites', 'increment'), {
      bearer: accessToken,
      headers: { 'x-request-id': requestId },
      json: { clientReqId: reqId() },
    });
    expect(t.logs.find((l) => l.msg === 'request' && l.requestId === requestId)).toMatchObject({ status: 200, userId: u.userId, via: 'bearer' });

    const until = new Date(t.clock.now().getTime() + 24 * 3600_000);
    await sql`update "user" set banned = true, "banExpires" = ${until} where id = ${u.userId}`.execute(t.db);
    for (const op of ['increment', 'decrement'] as const) {
      const refused = await call(op);
      expect(refused.status).toBe(401);
      expect(refused.body.error.code).toBe('UNAUTHORIZED');
    }
    const counted = await sql<{ used: number }>`select c.used from usage_counters c join subscriptions s on s.id = c.subscription_id
                                                 where s.user_id = ${u.userId}`.execute(t.db);
    expect(counted.rows.map((r) => Number(r.used))).toEqual([2]);

    await sql`delete from "user" where id = ${u.userId}`.execute(t.db);
    const gone = await call('increment');
    expect(gone.status).toBe(401);
    expect(gone.body.error.message).toBe('The access token belongs to no user');
  });

  it("refuses a cookie on a usage write, even with a valid bearer token beside it (the cookie wins and cannot write)", async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    const owner = await signUp(t);
    await subscribe(t, owner.userId, a.tierId);
    const { accessToken } = await accessTokenFor(t, owner, { agentId: a.agentId });
    const res = await t.http.post(usagePath(a.agentId, 'calls', 'increment'), { cookie: owner.cookie, bearer: accessToken, json: { clientReqId: reqId() } });
    expect([res.status, res.body.error?.code]).toEqual([403, 'FORBIDDEN']);
    expect((await t.http.get(usagePath(a.agentId, 'calls'), { cookie: owner.cookie })).body.data.used).toBe(0);
    const alone = await t.http.post(usagePath(a.agentId, 'calls', 'increment'), { bearer: accessToken, json: { clientReqId: reqId() } });
    expect(alone.status).toBe(200);
  });
});

describe('rolling and fixed periods', () => {
  it('starts a rolling metric at zero in the next billing period and never resets a fixed one', async () => {
    t.clock.set('2026-01-31T10:00:00.000Z');
    const a = await meteredAgent(t.db, [
      { slug: 'calls', kind: 'rolling', quota: 3 },
      { slug: 'sites', kind: 'fixed', quota: 3 },
    ]);
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, a.tierId);
    await increment(u, a.agentId, 'calls', { clientReqId: reqId(), amount: 3 });
    await increment(u, a.agentId, 'sites', { clientReqId: reqId(), amount: 2 });
    expect((await increment(u, a.agentId, 'calls', { clientReqId: reqId() })).status).toBe(429);

    t.clock.set('2026-02-28T09:59:59.999Z');
    expect((await increment(u, a.agentId, 'calls', { clientReqId: reqId() })).status).toBe(429);

    t.clock.set('2026-02-28T10:00:00.000Z');
    const next = await increment(u, a.agentId, 'calls', { clientReqId: reqId() });
    expect(next.status).toBe(200);
    expect(next.body.data).toMatchObject({
      used: 1,
      periodStart: '2026-02-28T10:00:00.000Z',
      periodEnd: '2026-03-31T10:00:00.000Z',
    });
    const list = await t.http.get(usagePath(a.agentId), { cookie: u.cookie });
    expect(list.status).toBe(200);
    expect(list.body.data).toEqual([
      {
        metric: 'calls',
        kind: 'rolling',
        used: 1,
        limit: 3,
        reserved: 0,
        remaining: 2,
        periodStart: '2026-02-28T10:00:00.000Z',
        periodEnd: '2026-03-31T10:00:00.000Z',
      },
      { metric: 'sites', kind: 'fixed', used: 2, reserved: 0, limit: 3, remaining: 1, periodStart: sub.createdAt, periodEnd: null },
    ]);
    // moving the clock back into the first period shows that period's counter again: nothing was reset
    t.clock.set('2026-02-01T00:00:00.000Z');
    expect((await t.http.get(usagePath(a.agentId, 'calls'), { cookie: u.cookie })).body.data.used).toBe(3);
    t.clock.set('2026-03-10T12:00:00.000Z');
  });
});

describe('decrementUsage', () => {
  it('decrements a fixed metric, floors at 0, and writes a ledger row each time', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'sites', kind: 'fixed', quota: 5 }]);
    const sub = await subscribe(t, user.userId, a.tierId);
    await increment(user, a.agentId, 'sites', { clientReqId: reqId(), amount: 3 });
    const res = await decrement(user, a.agentId, 'sites', { amount: 2 });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({
      metric: 'sites',
      kind: 'fixed',
      used: 1,
      limit: 5,
      reserved: 0,
      remaining: 4,
      periodStart: sub.createdAt,
      periodEnd: null,
      replayed: false,
    });
    expect(res.headers.get('x-quota-remaining')).toBe('4');
    const floor = await decrement(user, a.agentId, 'sites', { amount: 10 });
    expect(floor.body.data.used).toBe(0);
    const again = await decrement(user, a.agentId, 'sites');
    expect(again.body.data.used).toBe(0);
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 0, sum: 0 }]);
    const { rows } = await sql<{ event: string; delta: number }>`select event, delta::int as delta from quota_ledger
      where subscription_id = ${sub.id} order by created_at, id`.execute(t.db);
    expect(rows).toEqual([
      { event: 'increment', delta: 3 },
      { event: 'decrement', delta: -2 },
      { event: 'decrement', delta: -1 },
      { event: 'decrement', delta: 0 },
    ]);
  });

  it('is idempotent with a clientReqId', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'sites', kind: 'fixed', quota: 5 }]);
    await subscribe(t, user.userId, a.tierId);
    await increment(user, a.agentId, 'sites', { clientReqId: reqId(), amount: 4 });
    const key = reqId();
    const first = await decrement(user, a.agentId, 'sites', { clientReqId: key });
    const replay = await decrement(user, a.agentId, 'sites', { clientReqId: key });
    expect(first.body.data).toMatchObject({ used: 3, replayed: false });
    expect(replay.body.data).toEqual({ ...first.body.data, replayed: true });
    expect((await t.http.get(usagePath(a.agentId, 'sites'), { cookie: user.cookie })).body.data.used).toBe(3);
  });

  it('refuses a rolling metric with 422 NOT_DECREMENTABLE, and answers 402 / 404 like increment', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    const res = await decrement(user, a.agentId, 'calls');
    expect(res.status).toBe(402);
    await subscribe(t, user.userId, a.tierId);
    await increment(user, a.agentId, 'calls', { clientReqId: reqId() });
    const rolling = await decrement(user, a.agentId, 'calls');
    expect(rolling.status).toBe(422);
    expect(rolling.body.error.code).toBe('NOT_DECREMENTABLE');
    expect((await decrement(user, a.agentId, 'unknown')).status).toBe(404);
    expect((await decrement(user, a.agentId, 'calls', { amount: 0 })).status).toBe(400);
    expect((await t.http.get(usagePath(a.agentId, 'calls'), { cookie: user.cookie })).body.data.used).toBe(1);
  });
});

describe('listMyUsage / getMyUsage', () => {
  it('lists every metric of the agent, including ones never used, and reads one', async () => {
    const a = await meteredAgent(t.db, [
      { slug: 'b-fixed', kind: 'fixed', quota: 'none' },
      { slug: 'a-rolling', kind: 'rolling', quota: 7 },
    ]);
    const sub = await subscribe(t, user.userId, a.tierId);
    const list = await t.http.get(usagePath(a.agentId), { cookie: user.cookie });
    expect(list.status).toBe(200);
    expect(list.body.data.map((u: { metric: string }) => u.metric)).toEqual(['a-rolling', 'b-fixed']);
    expect(list.body.data[1]).toEqual({ metric: 'b-fixed', kind: 'fixed', used: 0, reserved: 0, limit: 0, remaining: 0, periodStart: sub.createdAt, periodEnd: null });
    const one = await t.http.get(usagePath(a.agentId, 'a-rolling'), { cookie: user.cookie });
    expect(one.body.data).toMatchObject({ metric: 'a-rolling', used: 0, limit: 7, remaining: 7 });
  });

  it('answers 404 with no active subscription to the agent, or for an unknown metric', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 7 }]);
    const u = await signUp(t);
    expect((await t.http.get(usagePath(a.agentId), { cookie: u.cookie })).status).toBe(404);
    expect((await t.http.get(usagePath(a.agentId, 'calls'), { cookie: u.cookie })).status).toBe(404);
    await subscribe(t, u.userId, a.tierId);
    const unknown = await t.http.get(usagePath(a.agentId, 'nope'), { cookie: u.cookie });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('NOT_FOUND');
  });

  it('reflects quota changes immediately (a raised tier quota counts at once)', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 1 }]);
    await subscribe(t, user.userId, a.tierId);
    await increment(user, a.agentId, 'calls', { clientReqId: reqId() });
    expect((await increment(user, a.agentId, 'calls', { clientReqId: reqId() })).status).toBe(429);
    await setQuota(t.db, a.tierId, a.metrics.calls!, 2);
    expect((await increment(user, a.agentId, 'calls', { clientReqId: reqId() })).status).toBe(200);
  });
});
