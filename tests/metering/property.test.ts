import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findActiveSubscription } from '../../functions/billing/subscriptions.ts';
import { ApiError } from '../../functions/http/errors.ts';
import { sql } from '../../functions/platform/db.ts';
import { grantAddon, revokeAddon } from '../../functions/metering/addons.ts';
import { callReservation, type ReservationCall } from '../../functions/metering/reservations.ts';
import { meterUsage } from '../../functions/metering/usage.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertUser, ledgerAgreesWithCounters, meteredAgent, subscribe } from './support.ts';

/**
 * Property-based: random sequences of increments, decrements, reservations (reserve, commit, release), addon
 * grants and revokes, replays, reused keys and billing period changes, run through the metering services against
 * the real database.
 *  - run one at a time, every answer equals a plain in-memory model of the rules;
 *  - run in concurrent batches, no admitted increment or hold ever left `used + reserved` above the effective
 *    quota it was checked against (recorded under the counter lock), denials were justified, every clientReqId
 *    counted at most once and answered the same way for the same request, and the ledger's deltas always add up
 *    to the counters.
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
  // replay: reuse the key of an earlier increment, with the same request (same) or another amount (a conflict)
  | { type: 'inc'; metric: Metric; amount: number; replay: number | null; same: boolean }
  | { type: 'reserve'; metric: Metric; amount: number }
  // settle the index-th reservation: commit `amount` (bounded by the held amount) or release it
  | { type: 'settle'; index: number; action: 'commit' | 'release'; amount: number }
  | { type: 'dec'; metric: Metric; amount: number; keyed: boolean }
  | { type: 'grant'; metric: Metric; amount: number; duration: 'permanent' | 'one_cycle' }
  | { type: 'revoke'; index: number }
  | { type: 'nextPeriod' };

const metricArb = fc.constantFrom<Metric>('calls', 'sites');
const usageOps = [
  fc.record({
    type: fc.constant('inc' as const),
    metric: metricArb,
    amount: fc.integer({ min: 1, max: 4 }),
    replay: fc.option(fc.nat(), { freq: 3 }),
    same: fc.oneof({ arbitrary: fc.constant(true), weight: 3 }, { arbitrary: fc.constant(false), weight: 1 }),
  }),
  fc.record({ type: fc.constant('dec' as const), metric: metricArb, amount: fc.integer({ min: 1, max: 3 }), keyed: fc.boolean() }),
  fc.record({
    type: fc.constant('grant' as const),
    metric: metricArb,
    amount: fc.integer({ min: 1, max: 4 }),
    duration: fc.constantFrom('permanent' as const, 'one_cycle' as const),
  }),
  fc.record({ type: fc.constant('revoke' as const), index: fc.nat() }),
  fc.record({ type: fc.constant('reserve' as const), metric: metricArb, amount: fc.integer({ min: 1, max: 4 }) }),
  fc.record({
    type: fc.constant('settle' as const),
    index: fc.nat(),
    action: fc.constantFrom('commit' as const, 'release' as const),
    amount: fc.nat({ max: 4 }),
  }),
];
const sequentialOp: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: usageOps[0]!, weight: 5 },
  { arbitrary: usageOps[1]!, weight: 2 },
  { arbitrary: usageOps[2]!, weight: 2 },
  { arbitrary: usageOps[3]!, weight: 2 },
  { arbitrary: usageOps[4]!, weight: 3 },
  { arbitrary: usageOps[5]!, weight: 3 },
  { arbitrary: fc.record({ type: fc.constant('nextPeriod' as const) }), weight: 2 },
) as fc.Arbitrary<Op>;
const concurrentOp: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: usageOps[0]!, weight: 6 },
  { arbitrary: usageOps[1]!, weight: 2 },
  { arbitrary: usageOps[2]!, weight: 2 },
  { arbitrary: usageOps[3]!, weight: 2 },
  { arbitrary: usageOps[4]!, weight: 4 },
  { arbitrary: usageOps[5]!, weight: 3 },
) as fc.Arbitrary<Op>;

interface Outcome {
  status: number;
  code?: string;
  used?: number;
  reserved?: number;
  limit?: number | null;
  replayed?: boolean;
  /** reservations: the state after the call */
  hold?: string;
}

type Usage = { used: number; reserved: number; limit: number | null };

async function outcome(call: () => Promise<Usage & { replayed: boolean; hold?: string }>, okStatus = 200): Promise<Outcome> {
  try {
    const r = await call();
    return { status: okStatus, used: r.used, reserved: r.reserved, limit: r.limit, replayed: r.replayed, ...(r.hold ? { hold: r.hold } : {}) };
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    const d = err.details as { used?: number; reserved?: number; limit?: number | null; replayed?: boolean };
    return {
      status: err.status,
      code: err.code,
      ...(err.code === 'QUOTA_EXCEEDED' ? { used: d.used, reserved: d.reserved, limit: d.limit, replayed: d.replayed } : {}),
    };
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
  const incKeys: Array<{ metric: Metric; key: string; amount: number }> = [];
  const addonIds: string[] = [];
  // reservations in the order they were asked for (denied ones included: settling one of those is skipped)
  const holds: Array<{ id: string | undefined; amount: number }> = [];
  const reservation = (operation: 'reserve' | 'commit' | 'release', call: Omit<ReservationCall, 'agentId'>) =>
    callReservation(t.db, t.clock, { operation, userId, call: { agentId: a.agentId, ...call } }).then(({ reservation: r, replayed }) => ({
      ...r.usage,
      replayed,
      hold: r.status,
      id: r.id,
    }));
  return {
    sub,
    incKeys,
    addonIds,
    run: async (op: Op): Promise<Outcome & { key?: string; amount?: number; addonIndex?: number; holdIndex?: number }> => {
      switch (op.type) {
        case 'inc': {
          const previous = op.replay !== null && incKeys.length ? incKeys[op.replay % incKeys.length]! : undefined;
          // a replayed key is replayed on its own metric (keys are per metric)
          const metric = previous?.metric ?? op.metric;
          const key = previous?.key ?? `k${++seq}`;
          const amount = previous && op.same ? previous.amount : op.amount;
          if (!previous) incKeys.push({ metric, key, amount });
          const r = await outcome(() =>
            meterUsage(t.db, t.clock, 'increment', { userId, agentId: a.agentId, metricSlug: metric, clientReqId: key, amount }),
          );
          return { ...r, key, amount };
        }
        case 'reserve': {
          const index = holds.push({ id: undefined, amount: op.amount }) - 1;
          const r = await outcome(async () => {
            const held = await reservation('reserve', { metricSlug: op.metric, clientReqId: `r${++seq}`, amount: op.amount, ttlSeconds: 3600 });
            holds[index]!.id = held.id;
            return held;
          }, 201);
          return { ...r, holdIndex: index };
        }
        case 'settle': {
          const hold = holds.length ? holds[op.index % holds.length]! : undefined;
          if (!hold?.id) return { status: 0 };
          const amount = Math.min(op.amount, hold.amount);
          const r = await outcome(() => reservation(op.action, { reservationId: hold.id, amount }));
          return { ...r, holdIndex: holds.indexOf(hold), amount };
        }
        case 'dec': {
          const clientReqId = op.keyed ? `d${++seq}` : undefined;
          return outcome(() => meterUsage(t.db, t.clock, 'decrement', { userId, agentId: a.agentId, metricSlug: op.metric, clientReqId, amount: op.amount }));
        }
        case 'grant': {
          try {
            const addon = await grantAddon(t.db, t.clock.now(), {
              actorUserId: admin,
              subscriptionId: sub.id,
              addon: { metricSlug: op.metric, amount: op.amount, duration: op.duration },
            });
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
          await revokeAddon(t.db, t.clock.now(), { actorUserId: admin, subscriptionId: sub.id, addonId: addonIds[index]! });
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
  amounts = new Map<string, number>();
  keyMetric = new Map<string, Metric>();
  // by the world's hold index; `epoch` is the period it was taken in (a period change expires every hold: ttl 1 h)
  holds: Array<{ metric: Metric; amount: number; epoch: number; status: 'held' | 'committed' | 'released' | 'denied'; committed?: number }> = [];
  private base: Record<Metric, number>;
  constructor(base: Record<Metric, number>) {
    this.base = base;
  }

  /** used, live holds and the effective limit of the counter a metric had in period `epoch` */
  usedAt(metric: Metric, epoch = this.period) {
    return metric === 'calls' ? (this.rolling.get(epoch) ?? 0) : this.fixed;
  }
  limitAt(metric: Metric, epoch = this.period) {
    return (
      this.base[metric] +
      this.addons
        .filter((a) => a.metric === metric && !a.revoked && (a.duration === 'permanent' || a.period === epoch))
        .reduce((s, a) => s + a.amount, 0)
    );
  }
  liveAt(metric: Metric, epoch = this.period) {
    if (KIND[metric] === 'rolling' && epoch !== this.period) return 0;
    return this.holds.filter((h) => h.metric === metric && h.status === 'held' && h.epoch === this.period).reduce((s, h) => s + h.amount, 0);
  }
  usage(metric: Metric, epoch = this.period) {
    return { used: this.usedAt(metric, epoch), reserved: this.liveAt(metric, epoch), limit: this.limitAt(metric, epoch) };
  }
  setUsed(metric: Metric, value: number) {
    if (metric === 'calls') this.rolling.set(this.period, value);
    else this.fixed = value;
  }

  apply(op: Op, actual: Outcome & { key?: string; amount?: number; addonIndex?: number; holdIndex?: number }): Outcome | undefined {
    switch (op.type) {
      case 'inc': {
        const metric = (actual.key ? this.keyMetric.get(actual.key) : undefined) ?? op.metric;
        const amount = actual.amount!;
        const stored = actual.key ? this.results.get(actual.key) : undefined;
        if (stored) {
          return this.amounts.get(actual.key!) === amount ? { ...stored, replayed: true } : { status: 409, code: 'IDEMPOTENCY_CONFLICT' };
        }
        const { used, reserved, limit } = this.usage(metric);
        const result: Outcome =
          used + reserved + amount <= limit
            ? { status: 200, used: used + amount, reserved, limit, replayed: false }
            : { status: 429, code: 'QUOTA_EXCEEDED', used, reserved, limit, replayed: false };
        if (result.status === 200) this.setUsed(metric, used + amount);
        this.results.set(actual.key!, result);
        this.amounts.set(actual.key!, amount);
        this.keyMetric.set(actual.key!, metric);
        return result;
      }
      case 'dec': {
        if (KIND[op.metric] === 'rolling') return { status: 422, code: 'NOT_DECREMENTABLE' };
        this.setUsed(op.metric, Math.max(0, this.usedAt(op.metric) - op.amount));
        return { status: 200, ...this.usage(op.metric), replayed: false };
      }
      case 'reserve': {
        const { used, reserved, limit } = this.usage(op.metric);
        const admitted = used + reserved + op.amount <= limit;
        this.holds[actual.holdIndex!] = { metric: op.metric, amount: op.amount, epoch: this.period, status: admitted ? 'held' : 'denied' };
        return admitted
          ? { status: 201, used, reserved: reserved + op.amount, limit, replayed: false, hold: 'held' }
          : { status: 429, code: 'QUOTA_EXCEEDED', used, reserved, limit, replayed: false };
      }
      case 'settle': {
        if (actual.holdIndex === undefined) return undefined; // nothing to settle (no hold yet, or the picked one was denied)
        const h = this.holds[actual.holdIndex]!;
        const amount = actual.amount!;
        const expired = h.status === 'held' && h.epoch !== this.period;
        const same = { status: 200, ...this.usage(h.metric, h.epoch), replayed: true, hold: h.status };
        if (expired) return { status: 422, code: 'INVALID_STATE' };
        if (h.status === 'held') {
          if (op.action === 'commit') {
            this.setUsed(h.metric, this.usedAt(h.metric) + amount);
            h.committed = amount;
          }
          h.status = op.action === 'commit' ? 'committed' : 'released';
          return { status: 200, ...this.usage(h.metric), replayed: false, hold: h.status };
        }
        if (op.action === 'commit' && h.status === 'committed') {
          return h.committed === amount ? same : { status: 409, code: 'IDEMPOTENCY_CONFLICT' };
        }
        if (op.action === 'release' && h.status === 'released') return same;
        return { status: 422, code: 'INVALID_STATE' };
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
}

/** What every ledger must satisfy, however the operations interleaved. */
async function checkLedger(subscriptionId: string) {
  for (const counter of await ledgerAgreesWithCounters(t.db, subscriptionId)) expect(counter.sum).toBe(counter.used);
  const { rows } = await sql<{ event: string; amount: number; used: number; reserved: number; quota_limit: number | null; client_req_id: string | null }>`
    select event, amount::int, used::int, reserved::int, quota_limit::int, client_req_id from quota_ledger
    where subscription_id = ${subscriptionId} and event in ('increment', 'increment_denied', 'reserved', 'reserve_denied')`.execute(t.db);
  for (const row of rows) {
    // admitted: the counter and the live holds after the call (the new hold included) within the limit it was checked against
    if (row.event === 'increment' || row.event === 'reserved') {
      expect(row.quota_limit === null || row.used + row.reserved <= row.quota_limit, JSON.stringify(row)).toBe(true);
    } else expect(row.quota_limit !== null && row.used + row.reserved + row.amount > row.quota_limit, JSON.stringify(row)).toBe(true);
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
            const { key: _k, amount: _m, addonIndex: _a, holdIndex: _h, ...observed } = actual;
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
              { type: 'inc', metric: 'calls', amount: 2, replay: null, same: true },
              { type: 'nextPeriod' },
              { type: 'inc', metric: 'calls', amount: 1, replay: null, same: true },
              { type: 'inc', metric: 'sites', amount: 2, replay: null, same: true },
              { type: 'inc', metric: 'calls', amount: 1, replay: 0, same: true },
              { type: 'inc', metric: 'calls', amount: 1, replay: 0, same: false },
            ],
          ],
          // a hold takes units from increments until settled; a period change expires it; a settled hold answers the same again
          [
            { calls: 5, sites: 3 },
            [
              { type: 'reserve', metric: 'calls', amount: 4 },
              { type: 'inc', metric: 'calls', amount: 2, replay: null, same: true },
              { type: 'settle', index: 0, action: 'commit', amount: 3 },
              { type: 'inc', metric: 'calls', amount: 2, replay: null, same: true },
              { type: 'settle', index: 0, action: 'commit', amount: 3 },
              { type: 'settle', index: 0, action: 'commit', amount: 2 },
              { type: 'settle', index: 0, action: 'release', amount: 0 },
              { type: 'reserve', metric: 'sites', amount: 3 },
              { type: 'nextPeriod' },
              { type: 'inc', metric: 'sites', amount: 3, replay: null, same: true },
              { type: 'settle', index: 1, action: 'release', amount: 0 },
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
              const admits = batch[i]!.type === 'inc' || batch[i]!.type === 'reserve';
              if (admits && (r.status === 200 || r.status === 201)) expect(r.limit === null || r.used! + r.reserved! <= r.limit!).toBe(true);
              if (batch[i]!.type !== 'inc' || !r.key) continue;
              const { key, amount, addonIndex: _a, holdIndex: _h, replayed, ...result } = r;
              const seen = firstResults.get(`${key}|${amount}`);
              // every answer for one request (clientReqId and amount) is the same result, however many times and however
              // concurrently; the same clientReqId with another amount is a conflict, whichever of the two came first
              if (seen) expect(result).toEqual(seen);
              else firstResults.set(`${key}|${amount}`, result);
              if (r.status !== 409) expect(typeof replayed).toBe('boolean');
            }
            await checkLedger(w.sub.id);
          }
        },
      ),
      { numRuns: 15 },
    );
  });
});
