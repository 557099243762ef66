import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findActiveSubscription } from '../../functions/billing/subscriptions.ts';
import { ApiError } from '../../functions/http/errors.ts';
import { sql } from '../../functions/platform/db.ts';
import { grantAddon, revokeAddon } from '../../functions/metering/addons.ts';
import { meterUsage } from '../../functions/metering/usage.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertUser, ledgerAgreesWithCounters, meteredAgent, subscribe } from './support.ts';

/**
 * Property-based: random sequences of increments, decrements, addon grants and revokes, replays and billing
 * period changes, run through the metering services against the real database.
 *  - run one at a time, every answer equals a plain in-memory model of the rules;
 *  - run in concurrent batches, no admitted increment ever left `used` above the effective quota it was
 *    checked against (recorded under the counter lock), denials were justified, every clientReqId counted
 *    at most once, and the ledger's deltas always add up to the counters.
 */

let t: TestApp;
let admin: string;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-01-31T10:00:00.000Z' });
  admin = await insertUser(t.db, { role: 'platform_admin' });
});
afterAll(() => t.close());

type Metric = 'calls' | 'sites';
const KIND: Record<Metric, 'rolling' | 'fixed'> = { calls: 'rolling', sites: 'fixed' };

type Op =
  | { type: 'inc'; metric: Metric; amount: number; replay: number | null }
  | { type: 'dec'; metric: Metric; amount: number; keyed: boolean }
  | { type: 'grant'; metric: Metric; amount: number; duration: 'permanent' | 'one_cycle' }
  | { type: 'revoke'; index: number }
  | { type: 'nextPeriod' };

const metricArb = fc.constantFrom<Metric>('calls', 'sites');
const usageOps = [
  fc.record({ type: fc.constant('inc' as const), metric: metricArb, amount: fc.integer({ min: 1, max: 4 }), replay: fc.option(fc.nat(), { freq: 3 }) }),
  fc.record({ type: fc.constant('dec' as const), metric: metricArb, amount: fc.integer({ min: 1, max: 3 }), keyed: fc.boolean() }),
  fc.record({
    type: fc.constant('grant' as const),
    metric: metricArb,
    amount: fc.integer({ min: 1, max: 4 }),
    duration: fc.constantFrom('permanent' as const, 'one_cycle' as const),
  }),
  fc.record({ type: fc.constant('revoke' as const), index: fc.nat() }),
];
const sequentialOp: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: usageOps[0]!, weight: 5 },
  { arbitrary: usageOps[1]!, weight: 2 },
  { arbitrary: usageOps[2]!, weight: 2 },
  { arbitrary: usageOps[3]!, weight: 2 },
  { arbitrary: fc.record({ type: fc.constant('nextPeriod' as const) }), weight: 2 },
) as fc.Arbitrary<Op>;
const concurrentOp: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: usageOps[0]!, weight: 6 },
  { arbitrary: usageOps[1]!, weight: 2 },
  { arbitrary: usageOps[2]!, weight: 2 },
  { arbitrary: usageOps[3]!, weight: 2 },
) as fc.Arbitrary<Op>;

interface Outcome {
  status: number;
  code?: string;
  used?: number;
  limit?: number | null;
  replayed?: boolean;
}

async function outcome(call: () => Promise<{ used: number; limit: number | null; replayed: boolean }>): Promise<Outcome> {
  try {
    const r = await call();
    return { status: 200, used: r.used, limit: r.limit, replayed: r.replayed };
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    const d = err.details as { used?: number; limit?: number | null; replayed?: boolean };
    return { status: err.status, code: err.code, ...(err.code === 'QUOTA_EXCEEDED' ? { used: d.used, limit: d.limit, replayed: d.replayed } : {}) };
  }
}

/** A fresh subscription with base quotas, and the operations bound to it. */
async function world(base: Record<Metric, number>) {
  t.clock.set('2026-01-31T10:00:00.000Z');
  const userId = await insertUser(t.db);
  const a = await meteredAgent(t.db, [
    { slug: 'calls', kind: 'rolling', quota: base.calls },
    { slug: 'sites', kind: 'fixed', quota: base.sites },
  ]);
  const sub = await subscribe(t, userId, a.tierId);
  let seq = 0;
  const incKeys: Array<{ metric: Metric; key: string }> = [];
  const addonIds: string[] = [];
  return {
    sub,
    incKeys,
    addonIds,
    run: async (op: Op): Promise<Outcome & { key?: string; addonIndex?: number }> => {
      switch (op.type) {
        case 'inc': {
          const previous = op.replay !== null && incKeys.length ? incKeys[op.replay % incKeys.length]! : undefined;
          // a replayed key is replayed on its own metric (keys are per metric)
          const metric = previous?.metric ?? op.metric;
          const key = previous?.key ?? `k${++seq}`;
          if (!previous) incKeys.push({ metric, key });
          const r = await outcome(() =>
            meterUsage(t.db, t.clock, 'increment', { userId, agentId: a.agentId, metricSlug: metric, clientReqId: key, amount: op.amount }),
          );
          return { ...r, key };
        }
        case 'dec': {
          const clientReqId = op.keyed ? `d${++seq}` : undefined;
          return outcome(() => meterUsage(t.db, t.clock, 'decrement', { userId, agentId: a.agentId, metricSlug: op.metric, clientReqId, amount: op.amount }));
        }
        case 'grant': {
          try {
            const addon = await grantAddon(t.db, t.clock.now(), admin, sub.id, { metricSlug: op.metric, amount: op.amount, duration: op.duration });
            addonIds.push(addon.id);
            return { status: 201, addonIndex: addonIds.length - 1 };
          } catch (err) {
            if (err instanceof ApiError) return { status: err.status, code: err.code };
            throw err;
          }
        }
        case 'revoke': {
          if (!addonIds.length) return { status: 0 };
          const index = op.index % addonIds.length;
          await revokeAddon(t.db, t.clock.now(), admin, sub.id, addonIds[index]!);
          return { status: 200, addonIndex: index };
        }
        case 'nextPeriod': {
          const current = await findActiveSubscription(t.db, t.clock, userId, a.agentId);
          t.clock.set(current!.currentPeriodEnd);
          return { status: 0 };
        }
      }
    },
  };
}

/** The rules, in memory. */
class Model {
  period = 0;
  rolling = new Map<number, number>();
  fixed = 0;
  addons: Array<{ metric: Metric; amount: number; duration: 'permanent' | 'one_cycle'; period: number; revoked: boolean }> = [];
  results = new Map<string, Outcome>();
  constructor(private base: Record<Metric, number>) {}

  used(metric: Metric) {
    return metric === 'calls' ? (this.rolling.get(this.period) ?? 0) : this.fixed;
  }
  limit(metric: Metric) {
    return (
      this.base[metric] +
      this.addons
        .filter((a) => a.metric === metric && !a.revoked && (a.duration === 'permanent' || a.period === this.period))
        .reduce((s, a) => s + a.amount, 0)
    );
  }
  setUsed(metric: Metric, value: number) {
    if (metric === 'calls') this.rolling.set(this.period, value);
    else this.fixed = value;
  }

  apply(op: Op, actual: Outcome & { key?: string; addonIndex?: number }): Outcome | undefined {
    switch (op.type) {
      case 'inc': {
        const metric = (actual.key ? this.keyMetric.get(actual.key) : undefined) ?? op.metric;
        const stored = actual.key ? this.results.get(actual.key) : undefined;
        if (stored) return { ...stored, replayed: true };
        const used = this.used(metric);
        const limit = this.limit(metric);
        const result: Outcome =
          used + op.amount <= limit
            ? { status: 200, used: used + op.amount, limit, replayed: false }
            : { status: 429, code: 'QUOTA_EXCEEDED', used, limit, replayed: false };
        if (result.status === 200) this.setUsed(metric, used + op.amount);
        this.results.set(actual.key!, result);
        this.keyMetric.set(actual.key!, metric);
        return result;
      }
      case 'dec': {
        if (KIND[op.metric] === 'rolling') return { status: 422, code: 'NOT_DECREMENTABLE' };
        const used = Math.max(0, this.used(op.metric) - op.amount);
        this.setUsed(op.metric, used);
        return { status: 200, used, limit: this.limit(op.metric), replayed: false };
      }
      case 'grant':
        if (op.duration === 'one_cycle' && KIND[op.metric] === 'fixed') return { status: 422, code: 'ONE_CYCLE_NOT_ALLOWED' };
        this.addons.push({ metric: op.metric, amount: op.amount, duration: op.duration, period: this.period, revoked: false });
        return { status: 201 };
      case 'revoke':
        if (actual.addonIndex !== undefined) this.addons[actual.addonIndex]!.revoked = true;
        return undefined;
      case 'nextPeriod':
        this.period++;
        return undefined;
    }
  }
  keyMetric = new Map<string, Metric>();
}

/** What every ledger must satisfy, however the operations interleaved. */
async function checkLedger(subscriptionId: string) {
  for (const counter of await ledgerAgreesWithCounters(t.db, subscriptionId)) expect(counter.sum).toBe(counter.used);
  const { rows } = await sql<{ event: string; amount: number; used: number; quota_limit: number | null; client_req_id: string | null }>`
    select event, amount::int, used::int, quota_limit::int, client_req_id from quota_ledger
    where subscription_id = ${subscriptionId} and event in ('increment', 'increment_denied')`.execute(t.db);
  for (const row of rows) {
    if (row.event === 'increment') expect(row.quota_limit === null || row.used <= row.quota_limit, JSON.stringify(row)).toBe(true);
    else expect(row.quota_limit !== null && row.used + row.amount > row.quota_limit, JSON.stringify(row)).toBe(true);
  }
  const keys = rows.map((r) => r.client_req_id);
  expect(new Set(keys).size).toBe(keys.length);
}

const baseArb = fc.record({ calls: fc.integer({ min: 0, max: 6 }), sites: fc.integer({ min: 0, max: 6 }) });

describe('metering properties', () => {
  it('one operation at a time, every answer matches the model of the rules', { timeout: 240_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(baseArb, fc.array(sequentialOp, { minLength: 1, maxLength: 30 }), async (base, ops) => {
        const w = await world(base);
        const model = new Model(base);
        for (const op of ops) {
          const actual = await w.run(op);
          const expected = model.apply(op, actual);
          if (expected) {
            const { key: _k, addonIndex: _a, ...observed } = actual;
            expect(observed, JSON.stringify(op)).toEqual(expected);
          }
        }
        await checkLedger(w.sub.id);
      }),
      {
        numRuns: 50,
        examples: [
          // a one_cycle addon stops counting when the period changes; a permanent one does not
          [
            { calls: 0, sites: 1 },
            [
              { type: 'grant', metric: 'calls', amount: 2, duration: 'one_cycle' },
              { type: 'grant', metric: 'sites', amount: 1, duration: 'permanent' },
              { type: 'inc', metric: 'calls', amount: 2, replay: null },
              { type: 'nextPeriod' },
              { type: 'inc', metric: 'calls', amount: 1, replay: null },
              { type: 'inc', metric: 'sites', amount: 2, replay: null },
              { type: 'inc', metric: 'calls', amount: 1, replay: 0 },
            ],
          ],
        ],
      },
    );
  });

  it('in concurrent batches, no increment is admitted past the quota and the ledger adds up', { timeout: 240_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(
        baseArb,
        fc.array(fc.array(concurrentOp, { minLength: 1, maxLength: 12 }), { minLength: 1, maxLength: 5 }),
        async (base, batches) => {
          const w = await world(base);
          const firstResults = new Map<string, Outcome>();
          for (const batch of batches) {
            const results = await Promise.all(batch.map((op) => w.run(op)));
            for (const [i, r] of results.entries()) {
              if (batch[i]!.type !== 'inc' || !r.key) continue;
              const { key, addonIndex: _a, replayed, ...result } = r;
              const seen = firstResults.get(key);
              // every answer for one clientReqId is the same result, however many times and however concurrently
              if (seen) expect(result).toEqual(seen);
              else firstResults.set(key, result);
              if (r.status === 200) expect(r.limit === null || r.used! <= r.limit!).toBe(true);
              expect(typeof replayed).toBe('boolean');
            }
            await checkLedger(w.sub.id);
          }
        },
      ),
      { numRuns: 15 },
    );
  });
});
