import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertUser, ledgerAgreesWithCounters, meteredAgent, subscribe } from './support.ts';

/**
 * Usage calls reach a counter slightly out of their time order (the group commit orders a batch by counter and
 * clientReqId; instances' clocks differ a little). An increment just after a hold's expiry does not count the hold;
 * a commit of that hold that arrived just before the expiry but runs after the increment must not add it as well
 * (contract: an increment and a hold never both past the limit). Migration 20261126000400.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-01-31T10:00:00.000Z' });
});
afterAll(() => t.close());

type Who = { userId: string; agentId: string };
const reserveAt = (who: Who, key: string, amount: number, now: string) =>
  first<{ outcome: string; reservation_id: string; expires_at: Date }>(
    t.db,
    sql`select * from public.metering_reserve(${who.userId}, ${who.agentId}, 'calls', ${key}, ${amount}, 60, ${now}::timestamptz)`,
  );
const incrementAt = (who: Who, key: string, amount: number, now: string) =>
  first<{ outcome: string; used: number }>(
    t.db,
    sql`select outcome, used::int as used from public.metering_increment(${who.userId}, ${who.agentId}, 'calls', ${key}, ${amount}, ${now}::timestamptz)`,
  );
const commitAt = (who: Who, reservationId: string, amount: number, now: string) =>
  first<{ outcome: string; status: string; used: number }>(
    t.db,
    sql`select outcome, status, used::int as used
          from public.metering_settle_reservation(${who.userId}, ${who.agentId}, ${reservationId}::uuid, 'commit', ${amount}, ${now}::timestamptz)`,
  );

describe('a hold committed after a later write left it out', () => {
  it('attack: a commit that arrived just before the expiry, run after an increment just after it, adds nothing', async () => {
    const userId = await insertUser(t.db);
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const sub = await subscribe(t, userId, a.tierId);
    const who = { userId, agentId: a.agentId };
    const hold = await reserveAt(who, 'hold-1', 10, '2026-02-01T00:00:00Z');
    expect(hold).toMatchObject({ outcome: 'ok' });
    expect(hold!.expires_at.toISOString()).toBe('2026-02-01T00:01:00.000Z');

    // 1 ms after the expiry: the hold no longer counts, so the increment takes the 10 units
    expect(await incrementAt(who, 'inc-1', 10, '2026-02-01T00:01:00.001Z')).toEqual({ outcome: 'ok', used: 10 });

    // the commit arrived 1 ms before the expiry, and runs now
    expect(await commitAt(who, hold!.reservation_id, 10, '2026-02-01T00:00:59.999Z')).toEqual({ outcome: 'expired', status: 'expired', used: 10 });
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 10, sum: 10 }]);
  });

  it('attack: a reserve just after more holds expired than it settles, then late commits of those it left: nothing counted beside it', async () => {
    // A reserve settles at most 100 expired holds of its counter (20261126000600) and did not move the counter's time,
    // so commits of the holds it left, arriving just before their expiry but run after it, found them live: 50 over
    // a quota of 150 (migration 20261126001700; found by a review).
    const userId = await insertUser(t.db);
    const N = 150;
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'fixed', quota: N }]);
    const sub = await subscribe(t, userId, a.tierId);
    const who = { userId, agentId: a.agentId };
    for (let i = 0; i < N; i++) expect(await reserveAt(who, `h-${i}`, 1, '2026-02-01T00:00:00Z')).toMatchObject({ outcome: 'ok' });
    // 1 ms after their expiry none counts: a hold of the whole quota is admitted
    expect(await reserveAt(who, 'big', N, '2026-02-01T00:01:00.001Z')).toMatchObject({ outcome: 'ok' });
    const left = await rows<{ id: string }>(
      t.db,
      sql`select id from usage_reservations where subscription_id = ${sub.id} and status = 'held' and client_req_id <> 'big'`,
    );
    expect(left.length).toBeGreaterThan(0);
    const outcomes = new Set<string>();
    for (const { id } of left) outcomes.add((await commitAt(who, id, 1, '2026-02-01T00:00:59.999Z'))!.outcome);
    expect([...outcomes]).toEqual(['expired']);
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 0, sum: 0 }]);
  });

  it('attack: a denied increment that arrived before the expiry, run between the two, does not move the counter\'s time back', async () => {
    // Every writer set updated_at to its own time, so this increment set it back to before the expiry and the late
    // commit found the hold live: 20 used on a quota of 10 (migration 20261126000900).
    const userId = await insertUser(t.db);
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const sub = await subscribe(t, userId, a.tierId);
    const who = { userId, agentId: a.agentId };
    const hold = await reserveAt(who, 'hold-1', 10, '2026-02-01T00:00:00Z');
    expect(await incrementAt(who, 'inc-a', 10, '2026-02-01T00:01:00.001Z')).toEqual({ outcome: 'ok', used: 10 });
    expect(await incrementAt(who, 'inc-b', 1, '2026-02-01T00:00:59.998Z')).toMatchObject({ outcome: 'quota_exceeded' });
    expect(await commitAt(who, hold!.reservation_id, 10, '2026-02-01T00:00:59.999Z')).toEqual({ outcome: 'expired', status: 'expired', used: 10 });
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 10, sum: 10 }]);
  });

  it('a commit before any later write still counts, up to the expiry', async () => {
    const userId = await insertUser(t.db);
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    await subscribe(t, userId, a.tierId);
    const hold = await first<{ reservation_id: string }>(
      t.db,
      sql`select * from public.metering_reserve(${userId}, ${a.agentId}, 'calls', 'hold-1', 10, 60, '2026-02-01T00:00:00Z')`,
    );
    const commit = await first<{ outcome: string; status: string; used: number }>(
      t.db,
      sql`select outcome, status, used::int as used
            from public.metering_settle_reservation(${userId}, ${a.agentId}, ${hold!.reservation_id}::uuid, 'commit', 4,
                                                    '2026-02-01T00:00:59.999Z')`,
    );
    expect(commit).toEqual({ outcome: 'ok', status: 'committed', used: 4 });
  });
});
