import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { commit, countReservations, ledgerEvents, reserve } from './reservation-support.ts';
import { agentToken, ledgerAgreesWithCounters, meter, meteredAgent, reqId, subscribe, usagePath } from './support.ts';

/**
 * One clientReqId names one request per (subscription, metric), whatever the operation (contract.md, Usage): a
 * replay of the same request answers the first result; the same key with another operation, amount or ttl answers
 * 409 IDEMPOTENCY_CONFLICT with the first request in `details.original`, and changes nothing.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

/** Everything a conflict must leave as it was: the counters, the holds, the ledger. */
async function snapshot(u: TestUser, agentId: string, subscriptionId: string) {
  const usage = (await t.http.get(usagePath(agentId), { cookie: u.cookie })).body.data;
  return { usage, ledger: await ledgerEvents(t.db, subscriptionId), holds: await countReservations(t.db, subscriptionId) };
}

function expectConflict(res: { status: number; body: any }, original: Record<string, unknown>) {
  expect([res.status, res.body.error?.code], JSON.stringify(res.body)).toEqual([409, 'IDEMPOTENCY_CONFLICT']);
  expect(res.body.error.details.original).toEqual(original);
}

describe('409 IDEMPOTENCY_CONFLICT', () => {
  let u: TestUser;
  beforeAll(async () => {
    u = await signUp(t);
  });

  it('an increment key reused with another amount (was: the first result, silently)', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const sub = await subscribe(t, u.userId, a.tierId);
    const key = reqId();
    const first = await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: key, amount: 3 });
    expect(first.status).toBe(200);
    const before = await snapshot(u, a.agentId, sub.id);
    const res = await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: key, amount: 4 });
    expectConflict(res, { operation: 'increment', amount: 3 });
    expect(res.body.error.details).toMatchObject({ metric: 'calls', clientReqId: key, request: { operation: 'increment', amount: 4 } });
    // the default amount is 1: omitting it is another request than amount 3
    expectConflict(await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: key }), { operation: 'increment', amount: 3 });
    expect(await snapshot(u, a.agentId, sub.id)).toEqual(before);
    // the same request still replays
    const replay = await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: key, amount: 3 });
    expect(replay.body.data).toEqual({ ...first.body.data, replayed: true });
  });

  it('a denied increment key reused with another amount is a conflict, not the stored 429', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 2 }]);
    const sub = await subscribe(t, u.userId, a.tierId);
    const key = reqId();
    expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: key, amount: 5 })).status).toBe(429);
    const before = await snapshot(u, a.agentId, sub.id);
    expectConflict(await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: key, amount: 1 }), { operation: 'increment', amount: 5 });
    expect(await snapshot(u, a.agentId, sub.id)).toEqual(before);
    expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: key, amount: 5 })).body.error.details.replayed).toBe(true);
  });

  it('increment and decrement keys are one namespace (was: 422 INVALID_STATE)', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'sites', kind: 'fixed', quota: 10 }]);
    const sub = await subscribe(t, u.userId, a.tierId);
    const inc = reqId();
    const dec = reqId();
    await meter(t, u, a.agentId, 'sites', 'increment', { clientReqId: inc, amount: 4 });
    await meter(t, u, a.agentId, 'sites', 'decrement', { clientReqId: dec, amount: 2 });
    const before = await snapshot(u, a.agentId, sub.id);
    expectConflict(await meter(t, u, a.agentId, 'sites', 'decrement', { clientReqId: inc, amount: 4 }), { operation: 'increment', amount: 4 });
    expectConflict(await meter(t, u, a.agentId, 'sites', 'increment', { clientReqId: dec, amount: 2 }), { operation: 'decrement', amount: 2 });
    expectConflict(await meter(t, u, a.agentId, 'sites', 'decrement', { clientReqId: dec, amount: 1 }), { operation: 'decrement', amount: 2 });
    expect(await snapshot(u, a.agentId, sub.id)).toEqual(before);
    expect(before.usage[0]).toMatchObject({ used: 2 });
    expect((await meter(t, u, a.agentId, 'sites', 'decrement', { clientReqId: dec, amount: 2 })).body.data).toMatchObject({ used: 2, replayed: true });
  });

  it('a reserve key reused with another amount or ttl, or for an increment, and an increment key reused for a reserve', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'rolling', quota: 100 }]);
    const sub = await subscribe(t, u.userId, a.tierId);
    const held = reqId();
    const counted = reqId();
    const hold = await reserve(t, u, a.agentId, 'tokens', { clientReqId: held, amount: 10, ttlSeconds: 120 });
    expect(hold.status).toBe(201);
    await meter(t, u, a.agentId, 'tokens', 'increment', { clientReqId: counted, amount: 5 });
    const before = await snapshot(u, a.agentId, sub.id);
    const original = { operation: 'reserve', amount: 10, ttlSeconds: 120 };
    expectConflict(await reserve(t, u, a.agentId, 'tokens', { clientReqId: held, amount: 11, ttlSeconds: 120 }), original);
    expectConflict(await reserve(t, u, a.agentId, 'tokens', { clientReqId: held, amount: 10, ttlSeconds: 60 }), original);
    expectConflict(await reserve(t, u, a.agentId, 'tokens', { clientReqId: held, amount: 10 }), original); // default ttl 300
    expectConflict(await meter(t, u, a.agentId, 'tokens', 'increment', { clientReqId: held, amount: 10 }), original);
    expectConflict(await reserve(t, u, a.agentId, 'tokens', { clientReqId: counted, amount: 5 }), { operation: 'increment', amount: 5 });
    expect(await snapshot(u, a.agentId, sub.id)).toEqual(before);
    expect(before.usage[0]).toMatchObject({ used: 5, reserved: 10 });
    // the same request replays the same hold
    const replay = await reserve(t, u, a.agentId, 'tokens', { clientReqId: held, amount: 10, ttlSeconds: 120 });
    expect([replay.status, replay.body.data.id, replay.headers.get('x-idempotent-replay')]).toEqual([201, hold.body.data.id, 'true']);
  });

  it('the default ttl is the same request as an explicit 300', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'rolling', quota: 100 }]);
    await subscribe(t, u.userId, a.tierId);
    const key = reqId();
    const hold = await reserve(t, u, a.agentId, 'tokens', { clientReqId: key, amount: 1 });
    const again = await reserve(t, u, a.agentId, 'tokens', { clientReqId: key, amount: 1, ttlSeconds: 300 });
    expect([again.status, again.body.data.id]).toEqual([201, hold.body.data.id]);
  });

  it('a commit repeated with another amount is a conflict naming the first commit', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'rolling', quota: 100 }]);
    const sub = await subscribe(t, u.userId, a.tierId);
    const hold = (await reserve(t, u, a.agentId, 'tokens', { clientReqId: reqId(), amount: 10 })).body.data;
    expect((await commit(t, u, a.agentId, hold.id, 7)).status).toBe(200);
    const before = await snapshot(u, a.agentId, sub.id);
    const res = await commit(t, u, a.agentId, hold.id, 8);
    expectConflict(res, { operation: 'commit', amount: 7 });
    expect(res.body.error.details.reservation).toMatchObject({ id: hold.id, status: 'committed', committedAmount: 7 });
    expect(await snapshot(u, a.agentId, sub.id)).toEqual(before);
  });

  it('keys are per metric: the same key on another metric is another request', async () => {
    const a = await meteredAgent(t.db, [
      { slug: 'calls', kind: 'rolling', quota: 10 },
      { slug: 'tokens', kind: 'rolling', quota: 10 },
    ]);
    await subscribe(t, u.userId, a.tierId);
    const key = reqId();
    expect((await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: key, amount: 2 })).status).toBe(200);
    expect((await reserve(t, u, a.agentId, 'tokens', { clientReqId: key, amount: 3 })).status).toBe(201);
  });

  it('parallel calls with one key and two amounts: one request wins, its twins replay it, the others conflict (5 rounds)', async () => {
    for (let round = 0; round < 5; round++) {
      const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 100 }]);
      const sub = await subscribe(t, u.userId, a.tierId);
      await agentToken(t, u, a.agentId);
      const key = reqId();
      const reserves = round % 2 === 1;
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          reserves
            ? reserve(t, u, a.agentId, 'calls', { clientReqId: key, amount: (i % 2) + 1 })
            : meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: key, amount: (i % 2) + 1 }),
        ),
      );
      const winners = results.filter((r) => r.status === (reserves ? 201 : 200));
      const conflicts = results.filter((r) => r.status === 409);
      expect(winners).toHaveLength(10);
      expect(conflicts).toHaveLength(10);
      const amount = reserves ? winners[0]!.body.data.amount : winners[0]!.body.data.used;
      for (const c of conflicts) {
        expect(c.body.error.details.original).toEqual(reserves ? { operation: 'reserve', amount, ttlSeconds: 300 } : { operation: 'increment', amount });
      }
      const usage = (await t.http.get(usagePath(a.agentId, 'calls'), { cookie: u.cookie })).body.data;
      expect(reserves ? usage.reserved : usage.used).toBe(amount);
      expect(await countReservations(t.db, sub.id)).toBe(reserves ? 1 : 0);
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from quota_ledger where subscription_id = ${sub.id}`.execute(t.db);
      expect(rows[0]!.n).toBe(1);
      expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: usage.used, sum: usage.used }]);
    }
  });
});
