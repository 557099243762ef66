import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { testTier } from '../support/databases.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { ledgerAgreesWithCounters, meteredAgent, reqId, subscribe, usagePath, meter } from './support.ts';

/**
 * Check-and-increment under concurrency, over HTTP. On the postgres tier the requests really run in parallel
 * (the app holds a pool of connections); on PGlite they serialize on its single connection, and the
 * outcome must be the same.
 */

let t: TestApp;
let user: TestUser;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  user = await signUp(t);
  admin = await createAdmin(t);
});
afterAll(() => t.close());

const increment = (agentId: string, slug: string, clientReqId: string, amount = 1) =>
  meter(t, user, agentId, slug, 'increment', { clientReqId, amount });

// Rounds: each gives the parallel calls another interleaving, which only the postgres tier's pool has to give; on
// PGlite a round replays much the same serial order, so a few show the same outcome there.
const ROUNDS = testTier() === 'postgres' ? 20 : 4;

describe('parallel increments', () => {
  it(`admits exactly the 10 units left out of 60 parallel increments (${ROUNDS} rounds)`, { timeout: 180_000 }, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const a = await meteredAgent(t.db, [{ slug: 'calls', kind: round % 2 ? 'fixed' : 'rolling', quota: 25 }]);
      const sub = await subscribe(t, user.userId, a.tierId);
      expect((await increment(a.agentId, 'calls', reqId(), 15)).status).toBe(200);

      const results = await Promise.all(Array.from({ length: 60 }, () => increment(a.agentId, 'calls', reqId())));
      const statuses = results.map((r) => r.status);
      expect(statuses.filter((s) => s === 200), `round ${round}`).toHaveLength(10);
      expect(statuses.filter((s) => s === 429), `round ${round}`).toHaveLength(50);
      // each admitted call saw a distinct counter value 16..25
      const seen = results.filter((r) => r.status === 200).map((r) => r.body.data.used).sort((x, y) => x - y);
      expect(seen).toEqual([16, 17, 18, 19, 20, 21, 22, 23, 24, 25]);
      for (const denied of results.filter((r) => r.status === 429)) {
        expect(denied.body.error.details).toMatchObject({ metric: 'calls', used: 25, limit: 25, requested: 1 });
      }
      const usage = await t.http.get(usagePath(a.agentId, 'calls'), { cookie: user.cookie });
      expect(usage.body.data).toMatchObject({ used: 25, remaining: 0 });
      expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 25, sum: 25 }]);
    }
  });

  it('counts 30 parallel calls with one clientReqId once; all answer the same result', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 100 }]);
    const sub = await subscribe(t, user.userId, a.tierId);
    const key = reqId();
    const results = await Promise.all(Array.from({ length: 30 }, () => increment(a.agentId, 'calls', key, 3)));
    expect(results.map((r) => r.status)).toEqual(Array(30).fill(200));
    const fresh = results.filter((r) => r.body.data.replayed === false);
    expect(fresh).toHaveLength(1);
    for (const r of results) {
      const { replayed: _, ...record } = r.body.data;
      const { replayed: __, ...firstRecord } = fresh[0]!.body.data;
      expect(record).toEqual(firstRecord);
    }
    expect(fresh[0]!.body.data.used).toBe(3);
    const usage = await t.http.get(usagePath(a.agentId, 'calls'), { cookie: user.cookie });
    expect(usage.body.data.used).toBe(3);
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from quota_ledger where subscription_id = ${sub.id}`.execute(t.db);
    expect(rows[0]!.n).toBe(1);
  });

  it('replays parallel duplicates of a denied call as the same 429', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 2 }]);
    const sub = await subscribe(t, user.userId, a.tierId);
    const key = reqId();
    const results = await Promise.all(Array.from({ length: 20 }, () => increment(a.agentId, 'calls', key, 3)));
    expect(results.map((r) => r.status)).toEqual(Array(20).fill(429));
    expect(results.filter((r) => r.body.error.details.replayed === false)).toHaveLength(1);
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 0, sum: 0 }]);
  });

  it('never admits past the quota while addons are revoked concurrently', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    const sub = await subscribe(t, user.userId, a.tierId);
    const grants = await Promise.all(
      [10, 10].map((amount) =>
        t.http.post(`/admin/subscriptions/${sub.id}/addons`, { cookie: admin.cookie, json: { metricSlug: 'calls', amount, duration: 'permanent' } }),
      ),
    );
    const calls = Array.from({ length: 40 }, () => increment(a.agentId, 'calls', reqId()));
    const revokes = grants.map((g) => t.http.post(`/admin/subscriptions/${sub.id}/addons/${g.body.data.id}/revoke`, { cookie: admin.cookie }));
    const [results] = await Promise.all([Promise.all(calls), Promise.all(revokes)]);
    const admitted = results.filter((r) => r.status === 200).length;
    expect(admitted).toBeGreaterThanOrEqual(5);
    expect(admitted).toBeLessThanOrEqual(25);
    // every admitted increment was within the effective quota it was checked against, under the counter lock
    const { rows } = await sql<{ used: number; quota_limit: number }>`select used::int, quota_limit::int from quota_ledger
      where subscription_id = ${sub.id} and event = 'increment'`.execute(t.db);
    expect(rows).toHaveLength(admitted);
    for (const row of rows) expect(row.used).toBeLessThanOrEqual(row.quota_limit);
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: admitted, sum: admitted }]);
  });
});
