import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { mailsTo } from '../support/mail.ts';
import { accessTokenFor, createFirstPartyClient } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import {
  commit,
  countReservations,
  getReservation,
  ledgerEvents,
  release,
  reservationPath,
  reserve,
  reservePath,
} from './reservation-support.ts';
import { agentToken, ledgerAgreesWithCounters, meter, meteredAgent, reqId, subscribe, usagePath } from './support.ts';

/**
 * Usage reservations over HTTP (contract.md, Usage): hold, commit, release, expiry by the injected clock, the quota
 * shared with increments under concurrency, idempotent replays, and who may touch a hold.
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

const usageOf = async (u: TestUser, agentId: string, slug: string) =>
  (await t.http.get(usagePath(agentId, slug), { cookie: u.cookie })).body.data;

describe('reservation lifecycle', () => {
  it('holds units against the quota, commits the actual amount and frees the rest', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'rolling', quota: 10 }]);
    const sub = await subscribe(t, user.userId, a.tierId);
    const now = t.clock.now();

    const held = await reserve(t, user, a.agentId, 'tokens', { clientReqId: reqId(), amount: 4 });
    expect(held.status).toBe(201);
    expect(held.body).toEqual({
      status: 'success',
      error: null,
      data: {
        id: expect.any(String),
        metric: 'tokens',
        status: 'held',
        amount: 4,
        committedAmount: null,
        expiresAt: new Date(now.getTime() + 300_000).toISOString(),
        createdAt: now.toISOString(),
        usage: {
          metric: 'tokens',
          kind: 'rolling',
          used: 0,
          reserved: 4,
          limit: 10,
          remaining: 6,
          periodStart: sub.currentPeriodStart,
          periodEnd: sub.currentPeriodEnd,
        },
      },
    });
    expect(held.headers.get('x-quota-limit')).toBe('10');
    expect(held.headers.get('x-quota-remaining')).toBe('6');
    expect(held.headers.get('x-idempotent-replay')).toBeNull();
    const id = held.body.data.id as string;

    // every usage record shows the hold: the user's reads, the admin's read, the increment result
    expect(await usageOf(user, a.agentId, 'tokens')).toMatchObject({ used: 0, reserved: 4, limit: 10, remaining: 6 });
    const adminUsage = await t.http.get(`/admin/subscriptions/${sub.id}/usage`, { cookie: admin.cookie });
    expect(adminUsage.body.data).toEqual([expect.objectContaining({ metric: 'tokens', used: 0, reserved: 4, remaining: 6 })]);
    const inc = await meter(t, user, a.agentId, 'tokens', 'increment', { clientReqId: reqId(), amount: 1 });
    expect(inc.body.data).toMatchObject({ used: 1, reserved: 4, limit: 10, remaining: 5, replayed: false });
    expect(inc.headers.get('x-quota-remaining')).toBe('5');

    const read = await getReservation(t, user, a.agentId, id);
    expect(read.status).toBe(200);
    expect(read.body.data).toMatchObject({ id, status: 'held', amount: 4, usage: { used: 1, reserved: 4, remaining: 5 } });

    const committed = await commit(t, user, a.agentId, id, 3);
    expect(committed.status).toBe(200);
    expect(committed.body.data).toMatchObject({
      id,
      status: 'committed',
      amount: 4,
      committedAmount: 3,
      usage: { used: 4, reserved: 0, limit: 10, remaining: 6 },
    });
    expect(committed.headers.get('x-idempotent-replay')).toBeNull();

    // commit is idempotent: the same reservation again, nothing counted twice
    const again = await commit(t, user, a.agentId, id, 3);
    expect(again.status).toBe(200);
    expect(again.body.data).toEqual(committed.body.data);
    expect(again.headers.get('x-idempotent-replay')).toBe('true');
    expect(await usageOf(user, a.agentId, 'tokens')).toMatchObject({ used: 4, reserved: 0, remaining: 6 });

    // a committed hold cannot be released
    const late = await release(t, user, a.agentId, id);
    expect([late.status, late.body.error.code]).toEqual([422, 'INVALID_STATE']);
    expect(late.body.error.details.reservation).toMatchObject({ id, status: 'committed' });

    expect(await ledgerEvents(t.db, sub.id)).toEqual([
      { event: 'reserved', amount: 4, delta: 0, reservation_id: id },
      { event: 'increment', amount: 1, delta: 1, reservation_id: null },
      { event: 'committed', amount: 3, delta: 3, reservation_id: id },
    ]);
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 4, sum: 4 }]);
    const ledger = await t.http.get(`/admin/subscriptions/${sub.id}/ledger`, { cookie: admin.cookie });
    expect(ledger.status).toBe(200);
    expect(ledger.body.data.map((e: { event: string }) => e.event)).toEqual(['committed', 'increment', 'reserved']);
    expect(ledger.body.data[2]).toMatchObject({ clientReqId: expect.any(String), details: { reservationId: id, ttlSeconds: 300 } });
    // its time written as every time of the API (jsonb wrote "+00:00": review 56)
    expect(ledger.body.data[2].details.expiresAt).toBe(new Date(ledger.body.data[2].details.expiresAt).toISOString());
  });

  it('releases everything; release is idempotent and a released hold cannot be committed', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'sites', kind: 'fixed', quota: 5 }]);
    const sub = await subscribe(t, user.userId, a.tierId);
    const held = await reserve(t, user, a.agentId, 'sites', { clientReqId: reqId(), amount: 5, ttlSeconds: 60 });
    expect(held.body.data).toMatchObject({ status: 'held', usage: { kind: 'fixed', used: 0, reserved: 5, remaining: 0, periodEnd: null } });
    const id = held.body.data.id as string;
    expect((await meter(t, user, a.agentId, 'sites', 'increment', { clientReqId: reqId() })).status).toBe(429);

    const released = await release(t, user, a.agentId, id);
    expect(released.status).toBe(200);
    expect(released.body.data).toMatchObject({ id, status: 'released', committedAmount: null, usage: { used: 0, reserved: 0, remaining: 5 } });
    const again = await release(t, user, a.agentId, id);
    expect(again.status).toBe(200);
    expect(again.body.data).toEqual(released.body.data);
    expect(again.headers.get('x-idempotent-replay')).toBe('true');

    const late = await commit(t, user, a.agentId, id, 1);
    expect([late.status, late.body.error.code]).toEqual([422, 'INVALID_STATE']);
    expect((await meter(t, user, a.agentId, 'sites', 'increment', { clientReqId: reqId(), amount: 5 })).status).toBe(200);
    expect((await ledgerEvents(t.db, sub.id)).map((e) => [e.event, e.delta])).toEqual([
      ['reserved', 0],
      ['increment_denied', 0],
      ['released', 0],
      ['increment', 5],
    ]);
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 5, sum: 5 }]);
  });

  it('commits 0 (nothing used) and refuses more than the held amount with 400, the hold untouched', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'rolling', quota: 100 }]);
    const sub = await subscribe(t, user.userId, a.tierId);
    const hold = (await reserve(t, user, a.agentId, 'tokens', { clientReqId: reqId(), amount: 20 })).body.data;
    const over = await commit(t, user, a.agentId, hold.id, 21);
    expect([over.status, over.body.error.code]).toEqual([400, 'VALIDATION_ERROR']);
    expect(over.body.error.details.issues).toEqual([{ path: 'amount', message: 'must be at most the held amount (20)' }]);
    expect((await getReservation(t, user, a.agentId, hold.id)).body.data).toMatchObject({ status: 'held', usage: { reserved: 20 } });

    const zero = await commit(t, user, a.agentId, hold.id, 0);
    expect(zero.body.data).toMatchObject({ status: 'committed', committedAmount: 0, usage: { used: 0, reserved: 0, remaining: 100 } });
    const full = (await reserve(t, user, a.agentId, 'tokens', { clientReqId: reqId(), amount: 20 })).body.data;
    expect((await commit(t, user, a.agentId, full.id, 20)).body.data).toMatchObject({ committedAmount: 20, usage: { used: 20, reserved: 0 } });
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 20, sum: 20 }]);
  });

  it('holds on an unlimited metric; a metric without a quota row admits nothing', async () => {
    const a = await meteredAgent(t.db, [
      { slug: 'free', kind: 'rolling', quota: null },
      { slug: 'none', kind: 'rolling', quota: 'none' },
    ]);
    await subscribe(t, user.userId, a.tierId);
    const held = await reserve(t, user, a.agentId, 'free', { clientReqId: reqId(), amount: 1_000_000 });
    expect(held.status).toBe(201);
    expect(held.body.data.usage).toMatchObject({ reserved: 1_000_000, limit: null, remaining: null });
    expect(held.headers.get('x-quota-remaining')).toBe('unlimited');
    const denied = await reserve(t, user, a.agentId, 'none', { clientReqId: reqId(), amount: 1 });
    expect([denied.status, denied.body.error.code]).toEqual([429, 'QUOTA_EXCEEDED']);
    expect(denied.body.error.details).toMatchObject({ metric: 'none', used: 0, reserved: 0, limit: 0, requested: 1 });
  });
});

describe('holds and increments share the quota', () => {
  it('a hold takes units from increments and an increment from holds; a denied reserve replays its 429', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const sub = await subscribe(t, user.userId, a.tierId);
    const held = (await reserve(t, user, a.agentId, 'calls', { clientReqId: reqId(), amount: 8 })).body.data;
    const tooMuch = await meter(t, user, a.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 3 });
    expect(tooMuch.status).toBe(429);
    expect(tooMuch.body.error.details).toMatchObject({ metric: 'calls', used: 0, reserved: 8, limit: 10, requested: 3 });
    expect(tooMuch.headers.get('x-quota-remaining')).toBe('2');
    expect((await meter(t, user, a.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 2 })).body.data).toMatchObject({
      used: 2,
      reserved: 8,
      remaining: 0,
    });
    const key = reqId();
    const denied = await reserve(t, user, a.agentId, 'calls', { clientReqId: key, amount: 1 });
    expect([denied.status, denied.body.error.code]).toEqual([429, 'QUOTA_EXCEEDED']);
    expect(denied.body.error.details).toEqual({ metric: 'calls', used: 2, reserved: 8, limit: 10, requested: 1, periodEnd: sub.currentPeriodEnd, replayed: false });

    // freeing the units does not turn the stored 429 of that clientReqId into a hold
    await release(t, user, a.agentId, held.id);
    const replay = await reserve(t, user, a.agentId, 'calls', { clientReqId: key, amount: 1 });
    expect(replay.status).toBe(429);
    expect(replay.body.error.details).toEqual({ ...denied.body.error.details, replayed: true });
    expect(await countReservations(t.db, sub.id)).toBe(1);
    expect(await usageOf(user, a.agentId, 'calls')).toMatchObject({ used: 2, reserved: 0, remaining: 8 });
  });

  it('60 parallel holds and increments against 10 remaining units admit exactly 10 units (5 rounds)', { timeout: 180_000 }, async () => {
    for (let round = 0; round < 5; round++) {
      const a = await meteredAgent(t.db, [{ slug: 'calls', kind: round % 2 ? 'fixed' : 'rolling', quota: 25 }]);
      const u = await signUp(t);
      const sub = await subscribe(t, u.userId, a.tierId);
      await agentToken(t, u, a.agentId);
      // 15 used and 0 held, or 10 used and 5 held: 10 units left either way
      if (round % 2) {
        expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 15 })).status).toBe(200);
      } else {
        expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 10 })).status).toBe(200);
        expect((await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 5, ttlSeconds: 3600 })).status).toBe(201);
      }

      const calls = Array.from({ length: 60 }, (_, i) =>
        i % 2
          ? reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 1 })
          : meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 1 }),
      );
      const results = await Promise.all(calls);
      const admitted = results.filter((r) => r.status === 200 || r.status === 201);
      const denied = results.filter((r) => r.status === 429);
      expect(admitted, `round ${round}`).toHaveLength(10);
      expect(denied, `round ${round}`).toHaveLength(50);
      for (const d of denied) expect(d.body.error.code).toBe('QUOTA_EXCEEDED');
      const usage = await usageOf(u, a.agentId, 'calls');
      expect(usage.used + usage.reserved).toBe(25);
      expect(usage.remaining).toBe(0);

      // settle the new holds: commit half of them, release the rest; the counter and the ledger agree
      const holds = admitted.filter((r) => r.status === 201).map((r) => r.body.data.id as string);
      const settled = await Promise.all(holds.map((id, i) => (i % 2 ? commit(t, u, a.agentId, id, 1) : release(t, u, a.agentId, id))));
      expect(settled.map((r) => r.status)).toEqual(holds.map(() => 200));
      const after = await usageOf(u, a.agentId, 'calls');
      const increments = admitted.length - holds.length;
      const committed = Math.floor(holds.length / 2);
      expect(after.used).toBe((round % 2 ? 15 : 10) + increments + committed);
      expect(after.reserved).toBe(round % 2 ? 0 : 5);
      expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: after.used, sum: after.used }]);
    }
  });

  it('30 parallel replays of one hold create one hold, and all answer it', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 100 }]);
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, a.tierId);
    await agentToken(t, u, a.agentId);
    const key = reqId();
    const results = await Promise.all(Array.from({ length: 30 }, () => reserve(t, u, a.agentId, 'calls', { clientReqId: key, amount: 7 })));
    expect(results.map((r) => r.status)).toEqual(Array(30).fill(201));
    expect(results.filter((r) => r.headers.get('x-idempotent-replay') === null)).toHaveLength(1);
    expect(new Set(results.map((r) => r.body.data.id)).size).toBe(1);
    expect(await countReservations(t.db, sub.id)).toBe(1);
    expect(await usageOf(u, a.agentId, 'calls')).toMatchObject({ used: 0, reserved: 7, remaining: 93 });
    expect((await ledgerEvents(t.db, sub.id)).map((e) => e.event)).toEqual(['reserved']);
  });

  it('parallel commits of one hold count it once; a commit racing a release: exactly one wins', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 100 }]);
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, a.tierId);
    const one = (await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 9 })).body.data;
    const commits = await Promise.all(Array.from({ length: 20 }, () => commit(t, u, a.agentId, one.id, 6)));
    expect(commits.map((r) => r.status)).toEqual(Array(20).fill(200));
    expect(commits.filter((r) => r.headers.get('x-idempotent-replay') === null)).toHaveLength(1);
    expect(await usageOf(u, a.agentId, 'calls')).toMatchObject({ used: 6, reserved: 0 });

    for (let round = 0; round < 5; round++) {
      const hold = (await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 2 })).body.data;
      const [c, r] = await Promise.all([commit(t, u, a.agentId, hold.id, 2), release(t, u, a.agentId, hold.id)]);
      expect([c.status, r.status].sort()).toEqual([200, 422]);
    }
    const usage = await usageOf(u, a.agentId, 'calls');
    expect(usage.reserved).toBe(0);
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: usage.used, sum: usage.used }]);
  });
});

describe('expiry', () => {
  it('returns the units at expiresAt by itself; commit and release after that are 422; the ledger catches up once', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, a.tierId);
    const hold = (await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 10, ttlSeconds: 60 })).body.data;
    expect(hold.expiresAt).toBe(new Date(t.clock.now().getTime() + 60_000).toISOString());
    expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId() })).status).toBe(429);

    t.clock.advance(59_999);
    expect(await usageOf(u, a.agentId, 'calls')).toMatchObject({ used: 0, reserved: 10, remaining: 0 });
    expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId() })).status).toBe(429);

    t.clock.advance(1); // now == expiresAt: the hold no longer counts, with no job run
    expect(await usageOf(u, a.agentId, 'calls')).toMatchObject({ used: 0, reserved: 0, remaining: 10 });
    const inc = await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 4 });
    expect(inc.body.data).toMatchObject({ used: 4, reserved: 0, remaining: 6 });

    const late = await commit(t, u, a.agentId, hold.id, 10);
    expect([late.status, late.body.error.code]).toEqual([422, 'INVALID_STATE']);
    expect(late.body.error.details.reservation).toMatchObject({ id: hold.id, status: 'expired', committedAmount: null });
    const lateRelease = await release(t, u, a.agentId, hold.id);
    expect([lateRelease.status, lateRelease.body.error.code]).toEqual([422, 'INVALID_STATE']);
    expect((await getReservation(t, u, a.agentId, hold.id)).body.data).toMatchObject({ status: 'expired', usage: { used: 4, reserved: 0 } });

    expect((await ledgerEvents(t.db, sub.id)).map((e) => [e.event, e.delta])).toEqual([
      ['reserved', 0],
      ['increment_denied', 0],
      ['increment_denied', 0],
      ['increment', 4],
      ['expired', 0],
    ]);
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 4, sum: 4 }]);
  });

  it('a replay of an expired hold answers it expired; a new reserve settles the expired holds of its counter', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'fixed', quota: 3 }]);
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, a.tierId);
    const key = reqId();
    const hold = (await reserve(t, u, a.agentId, 'calls', { clientReqId: key, amount: 2, ttlSeconds: 1 })).body.data;
    const other = (await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 1, ttlSeconds: 1 })).body.data;
    t.clock.advance(1_000);
    const next = await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 3 });
    expect(next.status).toBe(201);
    expect(next.body.data.usage).toMatchObject({ used: 0, reserved: 3, remaining: 0 });
    const { rows } = await sql<{ id: string; status: string }>`select id, status from usage_reservations where subscription_id = ${sub.id}`.execute(t.db);
    expect(Object.fromEntries(rows.map((r) => [r.id, r.status]))).toEqual({ [hold.id]: 'expired', [other.id]: 'expired', [next.body.data.id]: 'held' });

    const replay = await reserve(t, u, a.agentId, 'calls', { clientReqId: key, amount: 2, ttlSeconds: 1 });
    expect(replay.status).toBe(201);
    expect(replay.body.data).toMatchObject({ id: hold.id, status: 'expired' });
    expect((await ledgerEvents(t.db, sub.id)).filter((e) => e.event === 'expired')).toHaveLength(2);
  });

  it('attack: a reserve settles at most 100 of its counter\'s expired holds, so letting thousands expire stalls no batch', async () => {
    // Settling ran inside the group commit's transaction under the counter's lock, each ledger row summing the
    // counter's holds again: N holds let expire together cost N * N (6 s at 8,000), a stall for every agent's calls
    // in that batch (scripts/bench/expired-holds.ts measures it). Now at most 100 per reserve, the rest later.
    const a = await meteredAgent(t.db, [{ slug: 'jobs', kind: 'fixed', quota: null }]);
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, a.tierId);
    const now = t.clock.now();
    await sql`insert into usage_reservations (subscription_id, metric_id, counter_key, period_start, client_req_id, amount,
                                              ttl_seconds, status, expires_at, created_at)
              select ${sub.id}, ${a.metrics.jobs}, '-infinity', ${now}, 'old-' || i, 1, 60, 'held',
                     ${new Date(now.getTime() - 1_000)}, ${new Date(now.getTime() - 61_000)}
              from generate_series(1, 150) i`.execute(t.db);
    const live = await reserve(t, u, a.agentId, 'jobs', { clientReqId: reqId(), amount: 2 });
    expect(live.status).toBe(201);
    expect(live.body.data.usage).toMatchObject({ used: 0, reserved: 2 });
    const statuses = async () => {
      const { rows } = await sql<{ status: string; n: number }>`
        select status, count(*)::int as n from usage_reservations where subscription_id = ${sub.id} group by status order by status`.execute(t.db);
      return Object.fromEntries(rows.map((r) => [r.status, r.n]));
    };
    expect(await statuses()).toEqual({ expired: 100, held: 51 });
    // each expired row of the ledger records the live holds of its counter then: none (the new hold came after)
    const expiredRows = await sql<{ reserved: number }>`
      select reserved::int as reserved from quota_ledger where subscription_id = ${sub.id} and event = 'expired'`.execute(t.db);
    expect(expiredRows.rows.map((r) => r.reserved)).toEqual(Array(100).fill(0));
    // the next reserve, or the scheduler's sweep, settles the rest
    await first(t.db, sql`select public.metering_expire_reservations(${t.clock.now()}, 1000)`);
    expect(await statuses()).toEqual({ expired: 150, held: 1 });
  });

  it('public.metering_expire_reservations settles expired holds for a scheduler, once each', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 100 }]);
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, a.tierId);
    const holds = [];
    for (let i = 0; i < 3; i++) holds.push((await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 5, ttlSeconds: 30 })).body.data);
    const live = (await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 5, ttlSeconds: 3600 })).body.data;
    t.clock.advance(30_000);
    const expire = () =>
      first<{ n: number }>(t.db, sql`select public.metering_expire_reservations(${t.clock.now()}, 1000) as n`).then((r) => Number(r!.n));
    const settled = await expire();
    expect(settled).toBeGreaterThanOrEqual(3); // holds of other tests that expired meanwhile are settled too
    expect(await expire()).toBe(0);
    const { rows } = await sql<{ id: string; status: string }>`select id, status from usage_reservations where subscription_id = ${sub.id} order by created_at, id`.execute(t.db);
    expect(rows.filter((r) => r.status === 'expired').map((r) => r.id).sort()).toEqual(holds.map((h) => h.id).sort());
    expect(rows.find((r) => r.id === live.id)!.status).toBe('held');
    expect((await getReservation(t, u, a.agentId, holds[0].id)).body.data.status).toBe('expired');
    expect((await ledgerEvents(t.db, sub.id)).filter((e) => e.event === 'expired').map((e) => e.reservation_id).sort()).toEqual(
      holds.map((h) => h.id).sort(),
    );
    expect(await usageOf(u, a.agentId, 'calls')).toMatchObject({ used: 0, reserved: 5 });
  });
});

describe('errors', () => {
  it('402 without a subscription, 404 for an unknown metric or reservation', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const u = await signUp(t);
    const none = await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 1 });
    expect([none.status, none.body.error.code]).toEqual([402, 'SUBSCRIPTION_REQUIRED']);
    const unknownId = '00000000-0000-4000-8000-000000000000';
    expect((await getReservation(t, u, a.agentId, unknownId)).status).toBe(402);
    expect((await commit(t, u, a.agentId, unknownId, 1)).status).toBe(402);

    await subscribe(t, u.userId, a.tierId);
    const metric = await reserve(t, u, a.agentId, 'nope', { clientReqId: reqId(), amount: 1 });
    expect([metric.status, metric.body.error.code]).toEqual([404, 'NOT_FOUND']);
    for (const res of [
      await getReservation(t, u, a.agentId, unknownId),
      await commit(t, u, a.agentId, unknownId, 1),
      await release(t, u, a.agentId, unknownId),
    ]) {
      expect([res.status, res.body.error.code]).toEqual([404, 'NOT_FOUND']);
    }
  });

  it("another user's reservation, and a reservation of another agent, are 404 and stay untouched", async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const b = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const alice = await signUp(t);
    const bob = await signUp(t);
    await subscribe(t, alice.userId, a.tierId);
    await subscribe(t, alice.userId, b.tierId);
    await subscribe(t, bob.userId, a.tierId);
    const hold = (await reserve(t, alice, a.agentId, 'calls', { clientReqId: reqId(), amount: 4 })).body.data;

    for (const res of [
      await getReservation(t, bob, a.agentId, hold.id),
      await commit(t, bob, a.agentId, hold.id, 4),
      await release(t, bob, a.agentId, hold.id),
      // alice herself, through agent b (its own token, its own path): the hold is agent a's
      await getReservation(t, alice, b.agentId, hold.id),
      await commit(t, alice, b.agentId, hold.id, 4),
      await release(t, alice, b.agentId, hold.id),
    ]) {
      expect([res.status, res.body.error.code]).toEqual([404, 'NOT_FOUND']);
    }
    expect((await getReservation(t, alice, a.agentId, hold.id)).body.data).toMatchObject({ status: 'held', usage: { used: 0, reserved: 4 } });
    expect(await usageOf(alice, b.agentId, 'calls')).toMatchObject({ used: 0, reserved: 0 });
  });

  it('refuses bad input with 400 and holds nothing', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, a.tierId);
    for (const body of [
      {},
      { amount: 1 },
      { clientReqId: 'k' },
      { clientReqId: '', amount: 1 },
      { clientReqId: 'x'.repeat(256), amount: 1 },
      { clientReqId: 'k', amount: 0 },
      { clientReqId: 'k', amount: 1.5 },
      { clientReqId: 'k', amount: '2' },
      { clientReqId: 'k', amount: 1, ttlSeconds: 0 },
      { clientReqId: 'k', amount: 1, ttlSeconds: 3601 },
      { clientReqId: 'k', amount: 1, ttlSeconds: 2.5 },
    ]) {
      const res = await reserve(t, u, a.agentId, 'calls', body);
      expect([res.status, res.body.error.code], JSON.stringify(body)).toEqual([400, 'VALIDATION_ERROR']);
    }
    const hold = (await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 2 })).body.data;
    for (const amount of [-1, 1.5, '1', null]) {
      const res = await t.http.post(reservationPath(a.agentId, hold.id, 'commit'), { bearer: await agentToken(t, u, a.agentId), json: { amount } });
      expect([res.status, res.body.error.code], String(amount)).toEqual([400, 'VALIDATION_ERROR']);
    }
    const noBody = await t.http.post(reservationPath(a.agentId, hold.id, 'commit'), { bearer: await agentToken(t, u, a.agentId) });
    expect(noBody.status).toBe(400);
    const badId = await t.http.get(`/me/usage/${a.agentId}/reservations/not-a-uuid`, { bearer: await agentToken(t, u, a.agentId) });
    expect([badId.status, badId.body.error.code]).toEqual([400, 'VALIDATION_ERROR']);
    expect(await countReservations(t.db, sub.id)).toBe(1);
    expect(await usageOf(u, a.agentId, 'calls')).toMatchObject({ used: 0, reserved: 2 });
  });
});

describe('who may hold and settle', () => {
  it('a cookie session gets 403 on reserve, commit, release and read; nothing changes', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, a.tierId);
    const hold = (await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 6 })).body.data;
    const token = await agentToken(t, u, a.agentId);
    for (const auth of [{ cookie: u.cookie }, { cookie: u.cookie, bearer: token }]) {
      const results = [
        await t.http.post(reservePath(a.agentId, 'calls'), { ...auth, json: { clientReqId: reqId(), amount: 1 } }),
        await t.http.post(reservationPath(a.agentId, hold.id, 'commit'), { ...auth, json: { amount: 0 } }),
        await t.http.post(reservationPath(a.agentId, hold.id, 'release'), auth),
        await t.http.get(reservationPath(a.agentId, hold.id), auth),
      ];
      expect(results.map((r) => [r.status, r.body.error?.code])).toEqual(Array(4).fill([403, 'FORBIDDEN']));
    }
    expect((await getReservation(t, u, a.agentId, hold.id)).body.data).toMatchObject({ status: 'held', usage: { used: 0, reserved: 6 } });
    expect(await countReservations(t.db, sub.id)).toBe(1);
  });

  it("another agent's token gets 403 on this agent's reservations; nothing changes", async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const other = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, a.tierId);
    await subscribe(t, u.userId, other.tierId);
    const hold = (await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 6 })).body.data;
    const foreign = (await accessTokenFor(t, u, { agentId: other.agentId })).accessToken;
    const results = [
      await t.http.post(reservePath(a.agentId, 'calls'), { bearer: foreign, json: { clientReqId: reqId(), amount: 4 } }),
      await t.http.post(reservationPath(a.agentId, hold.id, 'commit'), { bearer: foreign, json: { amount: 6 } }),
      await t.http.post(reservationPath(a.agentId, hold.id, 'release'), { bearer: foreign }),
      await t.http.get(reservationPath(a.agentId, hold.id), { bearer: foreign }),
    ];
    expect(results.map((r) => [r.status, r.body.error?.code])).toEqual(Array(4).fill([403, 'FORBIDDEN']));
    expect((await getReservation(t, u, a.agentId, hold.id)).body.data).toMatchObject({ status: 'held', usage: { used: 0, reserved: 6 } });
    expect(await countReservations(t.db, sub.id)).toBe(1);
  });

  it("the marketplace's first-party token (no agent; only the database statement catches it) gets 403; nothing changes", async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const sub = await subscribe(t, admin.userId, a.tierId);
    const hold = (await reserve(t, admin, a.agentId, 'calls', { clientReqId: reqId(), amount: 6 })).body.data;
    const firstParty = (await accessTokenFor(t, admin, { client: await createFirstPartyClient(t), scope: 'openid admin' })).accessToken;
    const results = [
      await t.http.post(reservePath(a.agentId, 'calls'), { bearer: firstParty, json: { clientReqId: reqId(), amount: 4 } }),
      await t.http.post(reservationPath(a.agentId, hold.id, 'commit'), { bearer: firstParty, json: { amount: 6 } }),
      await t.http.post(reservationPath(a.agentId, hold.id, 'release'), { bearer: firstParty }),
      await t.http.get(reservationPath(a.agentId, hold.id), { bearer: firstParty }),
      await t.http.post(usagePath(a.agentId, 'calls', 'increment'), { bearer: firstParty, json: { clientReqId: reqId(), amount: 4 } }),
    ];
    expect(results.map((r) => [r.status, r.body.error?.code])).toEqual(Array(5).fill([403, 'FORBIDDEN']));
    expect((await getReservation(t, admin, a.agentId, hold.id)).body.data).toMatchObject({ status: 'held', usage: { used: 0, reserved: 6 } });
    expect(await countReservations(t.db, sub.id)).toBe(1);
  });

  it('without credentials: 401', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const res = await t.http.post(reservePath(a.agentId, 'calls'), { json: { clientReqId: reqId(), amount: 1 } });
    expect([res.status, res.body.error.code]).toEqual([401, 'UNAUTHORIZED']);
    const id = '00000000-0000-4000-8000-000000000000';
    expect((await t.http.get(reservationPath(a.agentId, id))).status).toBe(401);
    expect((await t.http.post(reservationPath(a.agentId, id, 'release'))).status).toBe(401);
  });
});

describe('reservations in /openapi.json', () => {
  it('lists the four operations, bearer-only, with the schemas the handlers validate with; 409 on increment and decrement', async () => {
    const doc = (await t.http.get('/openapi.json')).body;
    const op = (path: string, method: string) => doc.paths[path]?.[method];
    const ref = (schema: { $ref?: string }) => schema.$ref?.replace('#/components/schemas/', '');
    const operations: Array<[string, string, string, string]> = [
      ['reserveUsage', 'post', '/me/usage/{agentId}/{metricSlug}/reservations', '201'],
      ['commitReservation', 'post', '/me/usage/{agentId}/reservations/{reservationId}/commit', '200'],
      ['releaseReservation', 'post', '/me/usage/{agentId}/reservations/{reservationId}/release', '200'],
      ['getReservation', 'get', '/me/usage/{agentId}/reservations/{reservationId}', '200'],
    ];
    for (const [operationId, method, path, status] of operations) {
      const o = op(path, method);
      expect(o?.operationId, `${method} ${path}`).toBe(operationId);
      expect(o.security).toEqual([{ bearer: [] }]);
      const data = o.responses[status].content['application/json'].schema.properties.data;
      expect(ref(data), operationId).toBe('Reservation');
    }
    expect(ref(op(operations[0]![2], 'post').requestBody.content['application/json'].schema)).toBe('ReserveUsage');
    expect(ref(op(operations[1]![2], 'post').requestBody.content['application/json'].schema)).toBe('CommitReservation');
    expect(op(operations[2]![2], 'post').requestBody).toBeUndefined();
    expect(op(operations[0]![2], 'post').responses['429']).toBeDefined();
    expect(op(operations[1]![2], 'post').responses['409']).toBeDefined();

    const schemas = doc.components.schemas;
    expect(schemas.ReserveUsage.required.sort()).toEqual(['amount', 'clientReqId']);
    expect(schemas.ReserveUsage.properties.ttlSeconds).toMatchObject({ minimum: 1, maximum: 3600 });
    expect(schemas.CommitReservation.properties.amount).toMatchObject({ minimum: 0 });
    expect(Object.keys(schemas.Reservation.properties).sort()).toEqual(
      ['amount', 'committedAmount', 'createdAt', 'expiresAt', 'id', 'metric', 'status', 'usage'].sort(),
    );
    expect(schemas.Reservation.properties.status.enum).toEqual(['held', 'committed', 'released', 'expired']);
    expect(schemas.UsageRecord.required).toContain('reserved');
    for (const path of ['/me/usage/{agentId}/{metricSlug}/increment', '/me/usage/{agentId}/{metricSlug}/decrement']) {
      expect(op(path, 'post').responses['409'].description, path).toContain('IDEMPOTENCY_CONFLICT');
    }
  });
});

describe('agent webhooks from metering (the outbox, written with the change)', () => {
  /** An endpoint row as the admin API stores it (delivery is the webhooks suite's business; here: what goes out). */
  async function endpoint(agentId: string) {
    const now = t.clock.now();
    await sql`insert into webhook_endpoints (agent_id, url, events, secret_encrypted, created_at, updated_at)
              values (${agentId}, 'http://127.0.0.1:9/hook', ${['usage.threshold_reached', 'reservation.expired']}::text[],
                      'v1.test.test', ${now}, ${now})`.execute(t.db);
  }
  const events = async (agentId: string) =>
    (
      await sql<{ type: string; data: Record<string, unknown>; occurred_at: Date }>`
        select type, data, occurred_at from webhook_events where agent_id = ${agentId} order by seq`.execute(t.db)
    ).rows;

  it('usage.threshold_reached at 80 and 100 % counting holds, once per period; denied calls and replays emit nothing', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    await endpoint(a.agentId);
    const u = await signUp(t, { verified: true });
    const sub = await subscribe(t, u.userId, a.tierId);
    expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 5 })).status).toBe(200);
    expect(await events(a.agentId)).toEqual([]);

    const key = reqId();
    const hold = (await reserve(t, u, a.agentId, 'calls', { clientReqId: key, amount: 3 })).body.data; // 5 + 3 held = 80 %
    const base = { subscriptionId: sub.id, userId: u.userId, metric: 'calls', limit: 10, periodStart: sub.currentPeriodStart };
    expect((await events(a.agentId)).map((e) => [e.type, e.data])).toEqual([['usage.threshold_reached', { ...base, threshold: 80, used: 8 }]]);

    // a replay, a denied increment and a denied reserve write no ledger row, so no event
    await reserve(t, u, a.agentId, 'calls', { clientReqId: key, amount: 3 });
    expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 3 })).status).toBe(429);
    expect((await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 3 })).status).toBe(429);
    expect(await events(a.agentId)).toHaveLength(1);

    expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 2 })).status).toBe(200); // 7 + 3 held
    expect((await events(a.agentId)).map((e) => [e.type, e.data])).toEqual([
      ['usage.threshold_reached', { ...base, threshold: 80, used: 8 }],
      ['usage.threshold_reached', { ...base, threshold: 100, used: 10 }],
    ]);
    // committing less frees units; reaching 100 % again in the same period says nothing new
    await commit(t, u, a.agentId, hold.id, 1);
    expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 2 })).status).toBe(200);
    expect(await events(a.agentId)).toHaveLength(2);
    const { rows: mails } = await sql<{ n: number }>`select count(*)::int as n from mail_outbox where to_address = ${u.email}
                                                     and subject like 'You have used all of your%'`.execute(t.db);
    expect(mails[0]!.n).toBe(1);
  });

  it('reservation.expired once, when the expiry is noticed; settled holds emit nothing', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'fixed', quota: 1000 }]);
    await endpoint(a.agentId);
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, a.tierId);
    const key = reqId();
    const hold = (await reserve(t, u, a.agentId, 'tokens', { clientReqId: key, amount: 40, ttlSeconds: 30 })).body.data;
    const done = (await reserve(t, u, a.agentId, 'tokens', { clientReqId: reqId(), amount: 10, ttlSeconds: 30 })).body.data;
    await release(t, u, a.agentId, done.id);
    t.clock.advance(30_000);
    expect(await events(a.agentId)).toEqual([]); // nothing has looked at the hold yet

    expect((await commit(t, u, a.agentId, hold.id, 40)).status).toBe(422);
    await getReservation(t, u, a.agentId, hold.id);
    await release(t, u, a.agentId, hold.id);
    const sent = await events(a.agentId);
    expect(sent.map((e) => [e.type, e.data])).toEqual([
      [
        'reservation.expired',
        {
          id: hold.id,
          subscriptionId: sub.id,
          userId: u.userId,
          metric: 'tokens',
          status: 'expired',
          amount: 40,
          clientReqId: key,
          expiresAt: hold.expiresAt,
          createdAt: hold.createdAt,
        },
      ],
    ]);
    expect(sent[0]!.occurred_at.toISOString()).toBe(t.clock.now().toISOString());
  });

  describe('the user’s 100 % mail counts units used, not units held (review 07, migration 20261127000500)', () => {
    // contract.md: one mail per period "when a metric reaches 100%"; the mail says "has used N of N ... Further use is
    // refused". Before, it was queued from used + live holds, with the agent's 100 % event: a hold of the whole quota,
    // released or let expire, mailed the user with nothing used and spent the period's only mail.
    const fullMails = async (email: string) => (await mailsTo(t, email)).filter((m) => /used all of your/.test(m.subject));
    const usedOf = (mails: Array<{ text: string }>) => mails.map((m) => m.text.match(/has used \d+ of \d+/)?.[0]);

    it('attack: names nobody and goes to no unconfirmed address: an account with a stranger\'s address and a name of its own words (review 54)', async () => {
      const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 1 }]);
      const phishing = 'Your account is suspended for a failed payment. Restore it within 24 hours at https://billing.example/restore';
      // Anyone signs up with a stranger's address and a name of their choosing (rule 10); using up a quota of 1
      // mailed that name to the stranger, from the marketplace, as the mail's first line.
      const squatter = await signUp(t, { name: phishing });
      const owner = await signUp(t, { name: phishing, verified: true });
      for (const u of [squatter, owner]) {
        await subscribe(t, u.userId, a.tierId);
        expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId() })).status).toBe(200);
      }
      expect(await fullMails(squatter.email)).toEqual([]);
      const [mail, ...more] = await fullMails(owner.email);
      expect(more).toEqual([]);
      expect(mail!.text).toMatch(/^Hello,\n\nYour subscription to .* has used 1 of 1 /);
      expect(mail!.text).not.toContain('suspended');
    });

    it('is not sent for units only held, then released or expired; is sent once when the units are really used', async () => {
      const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
      await endpoint(a.agentId);
      const u = await signUp(t, { verified: true });
      await subscribe(t, u.userId, a.tierId);

      const held = await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 10, ttlSeconds: 60 });
      expect(held.status).toBe(201);
      // the agent still hears that its holds took the whole quota (docs/webhooks.md)
      expect((await events(a.agentId)).map((e) => [e.type, e.data.threshold, e.data.used])).toEqual([
        ['usage.threshold_reached', 80, 10],
        ['usage.threshold_reached', 100, 10],
      ]);
      const freed = await release(t, u, a.agentId, held.body.data.id);
      expect(freed.body.data.usage).toMatchObject({ used: 0, reserved: 0, remaining: 10 });

      const lapsed = await reserve(t, u, a.agentId, 'calls', { clientReqId: reqId(), amount: 10, ttlSeconds: 30 });
      expect(lapsed.status).toBe(201);
      t.clock.advance(31_000);
      expect((await getReservation(t, u, a.agentId, lapsed.body.data.id)).body.data).toMatchObject({ status: 'expired', usage: { used: 0 } });
      expect(await fullMails(u.email)).toEqual([]);

      // the whole quota really used, in parallel (the group commit's batches): one mail, with the figure used
      const used = await Promise.all(
        Array.from({ length: 10 }, () => meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId() })),
      );
      expect(used.map((r) => r.status)).toEqual(Array(10).fill(200));
      expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: reqId() })).status).toBe(429);
      const mails = await fullMails(u.email);
      expect(usedOf(mails)).toEqual(['has used 10 of 10']);
      expect(mails[0]!.text).toContain('Further use is refused');
      expect(await events(a.agentId)).toHaveLength(3); // and 100 % is not told to the agent twice: 80, 100, the expiry
    });

    it('is sent once when commits make the whole quota used, and not while part of it is only held', async () => {
      const a = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'fixed', quota: 10 }]);
      const whole = await signUp(t, { verified: true });
      await subscribe(t, whole.userId, a.tierId);
      const hold = await reserve(t, whole, a.agentId, 'tokens', { clientReqId: reqId(), amount: 10 });
      expect(await fullMails(whole.email)).toEqual([]);
      expect((await commit(t, whole, a.agentId, hold.body.data.id, 10)).body.data.usage).toMatchObject({ used: 10, reserved: 0 });
      expect(usedOf(await fullMails(whole.email))).toEqual(['has used 10 of 10']);

      // holds committed in parallel (one batch or several): the commit that makes the quota used mails, once
      const parts = await signUp(t, { verified: true });
      await subscribe(t, parts.userId, a.tierId);
      const holds = [];
      for (const amount of [3, 3, 4]) holds.push((await reserve(t, parts, a.agentId, 'tokens', { clientReqId: reqId(), amount })).body.data);
      const commits = await Promise.all(holds.map((h) => commit(t, parts, a.agentId, h.id, h.amount)));
      expect(commits.map((r) => r.status)).toEqual([200, 200, 200]);
      expect(usedOf(await fullMails(parts.email))).toEqual(['has used 10 of 10']);

      // a commit of less than held, beside a live hold of the rest: 100 % held, 9 used, no mail; the last unit used: the mail
      const less = await signUp(t, { verified: true });
      await subscribe(t, less.userId, a.tierId);
      const big = (await reserve(t, less, a.agentId, 'tokens', { clientReqId: reqId(), amount: 9 })).body.data;
      const rest = (await reserve(t, less, a.agentId, 'tokens', { clientReqId: reqId(), amount: 1 })).body.data;
      expect((await commit(t, less, a.agentId, big.id, 9)).body.data.usage).toMatchObject({ used: 9, reserved: 1, remaining: 0 });
      expect(await fullMails(less.email)).toEqual([]);
      expect((await release(t, less, a.agentId, rest.id)).status).toBe(200);
      expect((await meter(t, less, a.agentId, 'tokens', 'increment', { clientReqId: reqId() })).status).toBe(200);
      expect(usedOf(await fullMails(less.email))).toEqual(['has used 10 of 10']);
    });
  });
});

describe('the quota headers of an answer that changed nothing (review 90)', () => {
  it('a repeated commit or release answers the counter now, as the OpenAPI document says; a replayed increment the figures it saw', async () => {
    // The document promised the first call's figures for repeated commits and releases too, which they never answered.
    const described = (await t.http.get('/openapi.json')).body.paths['/me/usage/{agentId}/reservations/{reservationId}/commit'].post
      .responses['200'].headers['X-Idempotent-Replay'].description as string;
    expect(described).toContain('a repeated commit or a repeated release answer the reservation as it is now, and the X-Quota-* figures are the counter now');
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    await subscribe(t, user.userId, a.tierId);
    const held = (await reserve(t, user, a.agentId, 'calls', { clientReqId: reqId(), amount: 4 })).body.data.id as string;
    const committed = await commit(t, user, a.agentId, held, 2);
    expect(committed.headers.get('x-quota-remaining')).toBe('8');
    const incrementId = reqId();
    const counted = await meter(t, user, a.agentId, 'calls', 'increment', { clientReqId: incrementId, amount: 3 });
    expect(counted.headers.get('x-quota-remaining')).toBe('5');
    const released = (await reserve(t, user, a.agentId, 'calls', { clientReqId: reqId(), amount: 1 })).body.data.id as string;
    expect((await release(t, user, a.agentId, released)).headers.get('x-quota-remaining')).toBe('5');
    expect((await meter(t, user, a.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 1 })).status).toBe(200);

    const again = await commit(t, user, a.agentId, held, 2);
    expect([again.headers.get('x-idempotent-replay'), again.headers.get('x-quota-remaining')]).toEqual(['true', '4']);
    const releasedAgain = await release(t, user, a.agentId, released);
    expect([releasedAgain.headers.get('x-idempotent-replay'), releasedAgain.headers.get('x-quota-remaining')]).toEqual(['true', '4']);
    const replayed = await meter(t, user, a.agentId, 'calls', 'increment', { clientReqId: incrementId, amount: 3 });
    expect([replayed.headers.get('x-idempotent-replay'), replayed.headers.get('x-quota-remaining')]).toEqual(['true', '5']);
  });
});
