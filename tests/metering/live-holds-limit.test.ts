import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { commit, countReservations, ledgerEvents, release, reserve } from './reservation-support.ts';
import { agentToken, meter, meteredAgent, reqId, subscribe, usagePath, type MeteredAgent } from './support.ts';

/**
 * A counter has at most 1,000 live holds (security rule 17; migration 20261126002100_live_holds_have_a_bound.sql).
 * Every quota check of a counter (increment, reserve, commit, release, usage read) sums its live holds, and a hold
 * lives up to an hour: without a bound an agent reserving one unit at a time (or on an unlimited metric) kept 60,000
 * holds on one counter, each of its calls read them all inside the group commit's shared transaction, and other
 * agents' usage calls waited 4-8 s behind them (review 03 of limits). Now the reserve that would be the 1,001st live
 * hold answers 429 RATE_LIMITED, holds and records nothing, and Retry-After says when the oldest hold expires.
 *
 * The first 999 holds of a counter are rows inserted in SQL (the rows `reserve` leaves, as the expired-holds tests
 * make theirs), to keep the test short; the reserves that meet the limit go over HTTP as an agent backend sends them.
 */

const MAX_LIVE_HOLDS = 1000;

let t: TestApp;
let a: MeteredAgent;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-03-10T12:00:00.000Z' });
  a = await meteredAgent(t.db, [
    { slug: 'jobs', kind: 'fixed', quota: null },
    { slug: 'tokens', kind: 'rolling', quota: 1_000_000 },
  ]);
});
afterAll(() => t.close());

interface Holder {
  user: TestUser;
  subscriptionId: string;
}

async function holder(): Promise<Holder> {
  const user = await signUp(t);
  const sub = await subscribe(t, user.userId, a.tierId);
  await agentToken(t, user, a.agentId);
  return { user, subscriptionId: sub.id };
}

/**
 * `n` live holds of one unit on the user's fixed `jobs` counter, the i-th expiring `firstExpiresInS + i - 1` seconds
 * from now (so the oldest expires in `firstExpiresInS`).
 */
async function liveHoldsInSql(h: Holder, n: number, firstExpiresInS: number): Promise<void> {
  const now = t.clock.now();
  const { rows } = await sql<{ created_at: Date }>`select created_at from subscriptions where id = ${h.subscriptionId}`.execute(t.db);
  await sql`insert into usage_reservations (subscription_id, metric_id, counter_key, period_start, client_req_id, amount,
                                            ttl_seconds, status, expires_at, created_at)
            select ${h.subscriptionId}, ${a.metrics.jobs}, '-infinity', ${rows[0]!.created_at}, 'sql-hold-' || i, 1, 3600, 'held',
                   ${now}::timestamptz + make_interval(secs => ${firstExpiresInS} + i - 1), ${now}
            from generate_series(1, ${n}) i`.execute(t.db);
}

const heldCount = async (h: Holder) => {
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from usage_reservations where subscription_id = ${h.subscriptionId} and status = 'held'`.execute(t.db);
  return rows[0]!.n;
};

const usageOf = async (h: Holder, slug: string) => (await t.http.get(usagePath(a.agentId, slug), { cookie: h.user.cookie })).body.data;

function expectLiveHoldsRefusal(res: Awaited<ReturnType<typeof reserve>>, retryAfterSec: number) {
  expect(res.status, JSON.stringify(res.body)).toBe(429);
  expect(res.body.status).toBe('error');
  expect(res.body.data).toBeNull();
  expect(res.body.error.code).toBe('RATE_LIMITED');
  expect(res.headers.get('retry-after')).toBe(String(retryAfterSec));
  expect(res.body.error.details).toMatchObject({ maxLiveHolds: MAX_LIVE_HOLDS, metric: 'jobs', retryAfterSec });
}

describe('a counter holds at most 1,000 live holds', () => {
  it('the 1,001st live hold is refused 429 RATE_LIMITED with Retry-After, and nothing is held or recorded', async () => {
    const h = await holder();
    await liveHoldsInSql(h, MAX_LIVE_HOLDS - 1, 600);
    const thousandth = { clientReqId: reqId(), amount: 1, ttlSeconds: 3600 };
    const last = await reserve(t, h.user, a.agentId, 'jobs', thousandth);
    expect(last.status, JSON.stringify(last.body)).toBe(201);
    expect(last.body.data.usage).toMatchObject({ used: 0, reserved: MAX_LIVE_HOLDS, limit: null });
    const ledgerBefore = await ledgerEvents(t.db, h.subscriptionId);

    const over = { clientReqId: reqId(), amount: 1, ttlSeconds: 3600 };
    const refused = await reserve(t, h.user, a.agentId, 'jobs', over);
    // the oldest live hold (inserted first) expires in 600 s
    expectLiveHoldsRefusal(refused, 600);
    expect(refused.body.error.details.oldestHoldExpiresAt).toBe(new Date(t.clock.now().getTime() + 600_000).toISOString());

    expect(await countReservations(t.db, h.subscriptionId)).toBe(MAX_LIVE_HOLDS);
    expect(await ledgerEvents(t.db, h.subscriptionId)).toEqual(ledgerBefore);
    expect(await usageOf(h, 'jobs')).toMatchObject({ used: 0, reserved: MAX_LIVE_HOLDS });

    // not recorded: the same request again is judged again (still full, so refused again, never replayed as a 429)
    const again = await reserve(t, h.user, a.agentId, 'jobs', over);
    expectLiveHoldsRefusal(again, 600);
    expect(again.headers.get('x-idempotent-replay')).toBeNull();
    // the reserve that was admitted still replays its reservation at the limit
    const replay = await reserve(t, h.user, a.agentId, 'jobs', thousandth);
    expect(replay.status).toBe(201);
    expect(replay.headers.get('x-idempotent-replay')).toBe('true');
    expect(replay.body.data.id).toBe(last.body.data.id);
    expect(await countReservations(t.db, h.subscriptionId)).toBe(MAX_LIVE_HOLDS);
  });

  it('at the limit increments, commits and releases still work, and each settled hold makes room for exactly one more', async () => {
    const h = await holder();
    // the SQL holds expire first (from 900 s on), the ones reserved here in an hour
    await liveHoldsInSql(h, MAX_LIVE_HOLDS - 2, 900);
    const first = await reserve(t, h.user, a.agentId, 'jobs', { clientReqId: reqId(), amount: 3, ttlSeconds: 3600 });
    const second = await reserve(t, h.user, a.agentId, 'jobs', { clientReqId: reqId(), amount: 2, ttlSeconds: 3600 });
    expect([first.status, second.status]).toEqual([201, 201]);
    expectLiveHoldsRefusal(await reserve(t, h.user, a.agentId, 'jobs', { clientReqId: reqId(), amount: 1, ttlSeconds: 3600 }), 900);

    const inc = await meter(t, h.user, a.agentId, 'jobs', 'increment', { clientReqId: reqId(), amount: 5 });
    expect(inc.status).toBe(200);
    expect(inc.body.data).toMatchObject({ used: 5, reserved: MAX_LIVE_HOLDS - 2 + 3 + 2 });

    const committed = await commit(t, h.user, a.agentId, first.body.data.id, 2);
    expect(committed.status).toBe(200);
    expect(committed.body.data).toMatchObject({ status: 'committed', committedAmount: 2, usage: { used: 7, reserved: MAX_LIVE_HOLDS - 2 + 2 } });
    const third = await reserve(t, h.user, a.agentId, 'jobs', { clientReqId: reqId(), amount: 1, ttlSeconds: 3600 });
    expect(third.status).toBe(201);
    expectLiveHoldsRefusal(await reserve(t, h.user, a.agentId, 'jobs', { clientReqId: reqId(), amount: 1, ttlSeconds: 3600 }), 900);

    const released = await release(t, h.user, a.agentId, second.body.data.id);
    expect(released.status).toBe(200);
    expect(released.body.data.status).toBe('released');
    const fourth = await reserve(t, h.user, a.agentId, 'jobs', { clientReqId: reqId(), amount: 1, ttlSeconds: 3600 });
    expect(fourth.status).toBe(201);
    expectLiveHoldsRefusal(await reserve(t, h.user, a.agentId, 'jobs', { clientReqId: reqId(), amount: 1, ttlSeconds: 3600 }), 900);
    expect(await heldCount(h)).toBe(MAX_LIVE_HOLDS);
    expect(await usageOf(h, 'jobs')).toMatchObject({ used: 7, reserved: MAX_LIVE_HOLDS - 2 + 1 + 1 });
  });

  it("another user's counter of the same metric, and the user's other metrics, are not limited by a full counter", async () => {
    const full = await holder();
    await liveHoldsInSql(full, MAX_LIVE_HOLDS, 300);
    expectLiveHoldsRefusal(await reserve(t, full.user, a.agentId, 'jobs', { clientReqId: reqId(), amount: 1 }), 300);

    const other = await holder();
    const theirs = await reserve(t, other.user, a.agentId, 'jobs', { clientReqId: reqId(), amount: 1 });
    expect(theirs.status).toBe(201);
    expect(theirs.body.data.usage).toMatchObject({ reserved: 1 });
    const otherMetric = await reserve(t, full.user, a.agentId, 'tokens', { clientReqId: reqId(), amount: 4000 });
    expect(otherMetric.status).toBe(201);
    expect(otherMetric.body.data.usage).toMatchObject({ metric: 'tokens', reserved: 4000 });
  });

  it('an expired hold frees room: the same request, refused before, is admitted once the oldest hold expired', async () => {
    const h = await holder();
    await liveHoldsInSql(h, MAX_LIVE_HOLDS, 60);
    const request = { clientReqId: reqId(), amount: 1, ttlSeconds: 120 };
    expectLiveHoldsRefusal(await reserve(t, h.user, a.agentId, 'jobs', request), 60);

    t.clock.advance(30_000);
    expectLiveHoldsRefusal(await reserve(t, h.user, a.agentId, 'jobs', request), 30);

    t.clock.advance(30_000); // the oldest hold's expiresAt: no longer live
    const admitted = await reserve(t, h.user, a.agentId, 'jobs', request);
    expect(admitted.status, JSON.stringify(admitted.body)).toBe(201);
    expect(admitted.headers.get('x-idempotent-replay')).toBeNull();
    expect(admitted.body.data.usage).toMatchObject({ reserved: MAX_LIVE_HOLDS });
    // the next one waits for the next hold to expire, a second later
    expectLiveHoldsRefusal(await reserve(t, h.user, a.agentId, 'jobs', { clientReqId: reqId(), amount: 1 }), 1);
    // and from now on the first request replays its reservation
    const replay = await reserve(t, h.user, a.agentId, 'jobs', request);
    expect(replay.status).toBe(201);
    expect(replay.body.data.id).toBe(admitted.body.data.id);
  });

  it('concurrent reserves on a counter near the limit: exactly as many are admitted as it has room for', async () => {
    const h = await holder();
    await liveHoldsInSql(h, MAX_LIVE_HOLDS - 7, 600);
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => reserve(t, h.user, a.agentId, 'jobs', { clientReqId: reqId(), amount: 1 })),
    );
    const statuses = answers.map((r) => `${r.status} ${r.body.error?.code ?? ''}`.trim()).sort();
    expect(statuses).toEqual([...Array(7).fill('201'), ...Array(13).fill('429 RATE_LIMITED')]);
    expect(await heldCount(h)).toBe(MAX_LIVE_HOLDS);
  });
});
