import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { agentToken, ledgerAgreesWithCounters, meteredAgent, reqId, subscribe, usagePath, type MeteredAgent } from './support.ts';
import { reservationPath, reservePath } from './reservation-support.ts';

/**
 * Group commit (issue 16): usage writes sent concurrently over HTTP share batches (one statement, one transaction).
 * Property: random interleavings of increments, decrements, replays, conflicting reuses of a key, and addon grants and
 * revokes on a few subscriptions, all sent at once, end in a state that satisfies the audit (counters equal ledger
 * sums, no admitted increment past the quota it was checked against, no clientReqId counted twice), and every
 * answer agrees with its ledger row. Concurrent requests land in the same batches (the batcher takes whatever
 * arrived while a batch was out), so the per-call rules are exercised inside shared transactions.
 */

const DRAIN_TOKEN = 'drain-token-for-group-commit-0123456789';
let t: TestApp;
let admin: TestUser;
let agent: MeteredAgent;
const users: Array<{ user: TestUser; token: string; subscriptionId: string }> = [];

beforeAll(async () => {
  t = await startTestApp({ now: '2026-05-05T10:00:00.000Z', env: { DRAIN_TOKEN } });
  admin = await createAdmin(t);
  agent = await meteredAgent(t.db, [
    { slug: 'calls', kind: 'rolling', quota: 12 },
    { slug: 'sites', kind: 'fixed', quota: 8 },
  ]);
  for (let i = 0; i < 3; i++) {
    const user = await signUp(t);
    const sub = await subscribe(t, user.userId, agent.tierId);
    users.push({ user, token: await agentToken(t, user, agent.agentId), subscriptionId: sub.id });
  }
});
afterAll(() => t.close());

/** The instance's batch histogram (GET /internal/metering/batches), as an operator or the benchmark reads it. */
async function histogram() {
  const res = await t.http.get('/internal/metering/batches', { bearer: DRAIN_TOKEN });
  expect(res.status, res.text).toBe(200);
  return res.body.data as { batches: Array<{ size: number; count: number }>; batchCount: number; callCount: number };
}

type Metric = 'calls' | 'sites';
type Op =
  | { type: 'inc'; who: number; metric: Metric; amount: number; reuse: number | null; same: boolean }
  | { type: 'dec'; who: number; amount: number; keyed: boolean }
  | { type: 'grant'; who: number; metric: Metric; amount: number }
  | { type: 'revoke'; who: number };

const who = fc.integer({ min: 0, max: 2 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      type: fc.constant('inc' as const),
      who,
      metric: fc.constantFrom<Metric>('calls', 'sites'),
      amount: fc.integer({ min: 1, max: 4 }),
      reuse: fc.option(fc.nat({ max: 40 }), { freq: 3 }),
      same: fc.oneof({ arbitrary: fc.constant(true), weight: 3 }, { arbitrary: fc.constant(false), weight: 1 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ type: fc.constant('dec' as const), who, amount: fc.integer({ min: 1, max: 3 }), keyed: fc.boolean() }) },
  {
    weight: 1,
    arbitrary: fc.record({ type: fc.constant('grant' as const), who, metric: fc.constantFrom<Metric>('calls', 'sites'), amount: fc.integer({ min: 1, max: 4 }) }),
  },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('revoke' as const), who }) },
) as fc.Arbitrary<Op>;

interface Sent {
  op: Op;
  key: string | undefined;
  amount: number;
  status: number;
  body: any;
}

async function audit(subscriptionId: string) {
  for (const counter of await ledgerAgreesWithCounters(t.db, subscriptionId)) expect(counter.sum).toBe(counter.used);
  const { rows } = await sql<{ metric: string; event: string; amount: number; used: number; quota_limit: number | null; client_req_id: string | null; reserved: number }>`
    select m.slug as metric, l.event, l.amount::int, l.used::int, l.quota_limit::int, l.client_req_id, coalesce(l.reserved, 0)::int as reserved
      from quota_ledger l join metric_definitions m on m.id = l.metric_id
     where l.subscription_id = ${subscriptionId} and l.client_req_id is not null`.execute(t.db);
  for (const row of rows) {
    if (row.event === 'increment') expect(row.quota_limit === null || row.used + row.reserved <= row.quota_limit, JSON.stringify(row)).toBe(true);
    if (row.event === 'increment_denied') expect(row.quota_limit !== null && row.used + row.reserved + row.amount > row.quota_limit).toBe(true);
  }
  // the idempotency key is (metric, clientReqId): one row per key, however often and however concurrently it came
  const keys = rows.map((r) => `${r.metric}|${r.client_req_id}`);
  expect(new Set(keys).size).toBe(keys.length);
  return new Map(rows.map((r) => [`${r.metric}|${r.client_req_id}`, r]));
}

describe('group commit of usage writes', () => {
  it('random concurrent interleavings keep every rule, and every answer agrees with its ledger row', { timeout: 240_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 5, maxLength: 40 }), async (ops) => {
        const keys: string[] = [];
        const addons: Array<string | undefined> = [];
        const sends = ops.map(async (op, i): Promise<Sent | undefined> => {
          const { token, subscriptionId } = users[op.who]!;
          if (op.type === 'inc') {
            // reuse the key of an earlier op of this run (it may or may not have been sent yet: they race)
            const key = op.reuse !== null && keys.length > 0 ? keys[op.reuse % keys.length]! : reqId();
            keys.push(key);
            const amount = op.same ? op.amount : op.amount + 1;
            const res = await t.http.post(usagePath(agent.agentId, op.metric, 'increment'), { bearer: token, json: { clientReqId: key, amount } });
            return { op, key, amount, status: res.status, body: res.body };
          }
          if (op.type === 'dec') {
            const key = op.keyed ? reqId() : undefined;
            const res = await t.http.post(usagePath(agent.agentId, 'sites', 'decrement'), {
              bearer: token,
              json: { amount: op.amount, ...(key ? { clientReqId: key } : {}) },
            });
            return { op, key, amount: op.amount, status: res.status, body: res.body };
          }
          if (op.type === 'grant') {
            const res = await t.http.post(`/admin/subscriptions/${subscriptionId}/addons`, {
              cookie: admin.cookie,
              headers: { origin: t.baseUrl },
              json: { metricSlug: op.metric, amount: op.amount, duration: 'permanent' },
            });
            expect(res.status).toBe(201);
            addons[i] = res.body.data.id;
            return undefined;
          }
          const live = addons.filter(Boolean);
          if (live.length === 0) return undefined;
          const res = await t.http.post(`/admin/subscriptions/${subscriptionId}/addons/${live[0]}/revoke`, {
            cookie: admin.cookie,
            headers: { origin: t.baseUrl },
          });
          expect([200, 404]).toContain(res.status); // 404: that addon belongs to another user's subscription
          return undefined;
        });
        const sent = (await Promise.all(sends)).filter((s): s is Sent => s !== undefined);

        for (const s of sent) expect([200, 409, 422, 429], JSON.stringify(s.body)).toContain(s.status);
        const ledgers = new Map<string, Awaited<ReturnType<typeof audit>>>();
        for (const u of users) ledgers.set(u.subscriptionId, await audit(u.subscriptionId));
        // one request = (user, metric, clientReqId); the same key on another metric or user is another request
        const requestOf = (x: Sent) => `${x.op.who}|${x.op.type === 'inc' ? x.op.metric : 'sites'}|${x.key}`;
        const byRequest = new Map<string, Sent[]>();
        for (const s of sent) if (s.key) byRequest.set(requestOf(s), [...(byRequest.get(requestOf(s)) ?? []), s]);

        for (const s of sent.filter((x) => x.op.type === 'inc')) {
          const metric = (s.op as { metric: Metric }).metric;
          const row = ledgers.get(users[s.op.who]!.subscriptionId)!.get(`${metric}|${s.key}`);
          expect(row, JSON.stringify(s)).toBeDefined();
          if (s.status === 200) {
            expect(row!.event).toBe('increment');
            expect(s.body.data.used).toBe(row!.used);
            expect(s.amount).toBe(row!.amount);
          } else if (s.status === 429) {
            expect(row!.event).toBe('increment_denied');
            expect(s.body.error.details.used).toBe(row!.used);
            expect(s.amount).toBe(row!.amount);
          } else {
            // the same key with another amount: the stored request is the other one
            expect([s.status, s.body.error.code]).toEqual([409, 'IDEMPOTENCY_CONFLICT']);
            expect(row!.amount).not.toBe(s.amount);
          }
        }
        // among the answers that carry a request's stored result, exactly one is the first (not a replay)
        for (const group of byRequest.values()) {
          const answered = group.filter((g) => g.op.type === 'inc' && (g.status === 200 || g.status === 429));
          if (answered.length === 0) continue;
          const firsts = answered.filter((g) => (g.status === 200 ? g.body.data.replayed : g.body.error.details.replayed) === false);
          expect(firsts.length, JSON.stringify(group.map((g) => [g.status, g.amount]))).toBe(1);
        }
      }),
      { numRuns: 12 },
    );
  });

  it('a lone call waits for nothing and a crowd shares batches: 200 concurrent increments, exact totals', async () => {
    const { token, user } = users[0]!;
    await sql`update tier_quotas set quota_limit = null where tier_id = ${agent.tierId}`.execute(t.db);
    try {
      const lone = await histogram();
      const one = await t.http.post(usagePath(agent.agentId, 'calls', 'increment'), { bearer: token, json: { clientReqId: reqId() } });
      expect(one.status).toBe(200);
      const afterLone = await histogram();
      // a lone call went out at once, as a batch of its own
      expect([afterLone.callCount - lone.callCount, afterLone.batchCount - lone.batchCount]).toEqual([1, 1]);
      const before = (await t.http.get(usagePath(agent.agentId, 'calls'), { cookie: user.cookie })).body.data;
      const results = await Promise.all(
        Array.from({ length: 200 }, () => t.http.post(usagePath(agent.agentId, 'calls', 'increment'), { bearer: token, json: { clientReqId: reqId() } })),
      );
      expect(results.every((r) => r.status === 200)).toBe(true);
      const after = (await t.http.get(usagePath(agent.agentId, 'calls'), { cookie: user.cookie })).body.data;
      expect(after.used).toBe(before.used + 200);
      // every answer saw its own increment: 200 distinct counter values
      expect(new Set(results.map((r) => r.body.data.used)).size).toBe(200);
      // every call went through a batch, and on a real server (where queries run beside the service) they shared
      // batches: fewer statements than calls. The embedded database runs each query on the service's own thread, so
      // calls rarely find a batch to join there.
      const crowd = await histogram();
      expect(crowd.callCount - afterLone.callCount).toBe(200);
      if (t.database.kind === 'postgres') expect(crowd.batchCount - afterLone.batchCount).toBeLessThan(200);
      expect(crowd.batches.map((b) => b.size)).toEqual([...crowd.batches.map((b) => b.size)].sort((a, b) => a - b));
    } finally {
      await sql`update tier_quotas set quota_limit = 12 where tier_id = ${agent.tierId} and metric_id = ${agent.metrics.calls!}`.execute(t.db);
      await sql`update tier_quotas set quota_limit = 8 where tier_id = ${agent.tierId} and metric_id = ${agent.metrics.sites!}`.execute(t.db);
    }
  });

  it("the batch function still takes the previous release's arguments, so instances not yet replaced in a rolling deploy keep metering", async () => {
    const { rows } = await sql<{ call_index: number; caller_status: string; outcome: string | null }>`
      select call_index, caller_status, outcome from public.metering_batch_as_bearer(
        p_operations => array['increment'], p_user_ids => array['no-such-user'], p_token_keys => array['k'],
        p_issued_ats => array[now()], p_client_ids => array['c'], p_token_agent_ids => array[${agent.agentId}::uuid],
        p_agent_ids => array[${agent.agentId}::uuid], p_metric_slugs => array['calls'], p_client_req_ids => array['r'],
        p_amounts => array[1::bigint], p_nows => array[now()])`.execute(t.db);
    expect(rows).toEqual([{ call_index: 1, caller_status: 'no_user', outcome: null }]);
  });

  it('reservations share the batches: concurrent holds, commits, releases and increments on one counter, exact totals', async () => {
    // a subscriber of its own, so the counter starts at 0 whatever the tests above left
    const user = await signUp(t);
    const sub = await subscribe(t, user.userId, agent.tierId);
    const token = await agentToken(t, user, agent.agentId);
    const before = await histogram();

    // 1. 10 holds of 2 and 10 increments of 1, all at once, on a quota of 12 (demand 30)
    const [holds, increments] = await Promise.all([
      Promise.all(
        Array.from({ length: 10 }, () =>
          t.http.post(reservePath(agent.agentId, 'calls'), { bearer: token, json: { clientReqId: reqId(), amount: 2 } }),
        ),
      ),
      Promise.all(
        Array.from({ length: 10 }, () => t.http.post(usagePath(agent.agentId, 'calls', 'increment'), { bearer: token, json: { clientReqId: reqId() } })),
      ),
    ]);
    for (const r of [...holds, ...increments]) expect([200, 201, 429], r.text).toContain(r.status);
    const held = holds.filter((r) => r.status === 201).map((r) => r.body.data.id as string);
    const counted = increments.filter((r) => r.status === 200).length;
    // never past the quota; and nothing that still fitted was refused (usage only grew, so a refused increment means
    // the counter was full, a refused hold of 2 that at most 1 unit was free)
    expect(held.length * 2 + counted).toBeLessThanOrEqual(12);
    if (counted < 10) expect(held.length * 2 + counted).toBe(12);
    else if (held.length < 10) expect(held.length * 2 + counted).toBeGreaterThanOrEqual(11);
    const usage = (await t.http.get(usagePath(agent.agentId, 'calls'), { cookie: user.cookie })).body.data;
    expect(usage).toMatchObject({ used: counted, reserved: held.length * 2 });

    // 2. every hold settled at once (the first half committed as 1 unit, the rest released), with 4 more increments
    const half = Math.ceil(held.length / 2);
    const settled = await Promise.all([
      ...held.map((id, i) =>
        i < half
          ? t.http.post(reservationPath(agent.agentId, id, 'commit'), { bearer: token, json: { amount: 1 } })
          : t.http.post(reservationPath(agent.agentId, id, 'release'), { bearer: token }),
      ),
      ...Array.from({ length: 4 }, () => t.http.post(usagePath(agent.agentId, 'calls', 'increment'), { bearer: token, json: { clientReqId: reqId() } })),
    ]);
    const settles = settled.slice(0, held.length);
    expect(settles.map((r) => r.status)).toEqual(held.map(() => 200));
    expect(settles.map((r) => r.body.data.status)).toEqual(held.map((_, i) => (i < half ? 'committed' : 'released')));
    const later = settled.slice(held.length).filter((r) => r.status === 200).length;
    const after = (await t.http.get(usagePath(agent.agentId, 'calls'), { cookie: user.cookie })).body.data;
    expect(after).toMatchObject({ used: counted + half + later, reserved: 0 });
    for (const counter of await ledgerAgreesWithCounters(t.db, sub.id)) expect(counter.sum).toBe(counter.used);

    // every one of these calls, holds and settlements included, went out through the batches
    const now = await histogram();
    expect(now.callCount - before.callCount).toBe(20 + held.length + 4);
    if (t.database.kind === 'postgres') expect(now.batchCount - before.batchCount).toBeLessThan(20 + held.length + 4);
  });
});
