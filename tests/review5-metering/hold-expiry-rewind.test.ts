import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertUser, ledgerAgreesWithCounters, meteredAgent, subscribe } from '../metering/support.ts';

/**
 * Review 5. Migration 20261126000400 judges a commit's expiry at greatest(p_now, counter.updated_at), "time never goes
 * back on a counter". But metering_increment writes `updated_at = excluded.updated_at` (its own p_now) unconditionally,
 * also when it is denied, so a later-running call that arrived earlier moves updated_at BACK, and the late commit of an
 * expired hold counts again: the hold's units and the increment that took them are both counted, past the limit.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-01-31T10:00:00.000Z' });
});
afterAll(() => t.close());

describe('review5: counter time goes back through an increment', () => {
  it('attack: a denied increment that arrived before the expiry rewinds updated_at; the late commit then counts the hold too', async () => {
    const userId = await insertUser(t.db);
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const sub = await subscribe(t, userId, a.tierId);
    const hold = await first<{ outcome: string; reservation_id: string }>(
      t.db,
      sql`select * from public.metering_reserve(${userId}, ${a.agentId}, 'calls', 'hold-1', 10, 60, '2026-02-01T00:00:00Z')`,
    );
    expect(hold).toMatchObject({ outcome: 'ok' }); // expires 00:01:00

    // 1 ms after the expiry: the hold no longer counts, the increment takes the 10 units
    const inc = await first<{ outcome: string; used: number }>(
      t.db,
      sql`select outcome, used::int as used from public.metering_increment(${userId}, ${a.agentId}, 'calls', 'inc-a', 10,
                                                                           '2026-02-01T00:01:00.001Z')`,
    );
    expect(inc).toEqual({ outcome: 'ok', used: 10 });

    // a call that arrived 2 ms before the expiry runs now (same batch, later in clientReqId order, or another instance):
    // it sees the hold live and is denied, but writes the counter's updated_at = its own (earlier) time
    const denied = await first<{ outcome: string }>(
      t.db,
      sql`select outcome from public.metering_increment(${userId}, ${a.agentId}, 'calls', 'inc-b', 1, '2026-02-01T00:00:59.998Z')`,
    );
    expect(denied).toEqual({ outcome: 'quota_exceeded' });

    // the commit that arrived 1 ms before the expiry runs last: it must find the hold expired (as without inc-b)
    const commit = await first<{ outcome: string; status: string; used: number }>(
      t.db,
      sql`select outcome, status, used::int as used
            from public.metering_settle_reservation(${userId}, ${a.agentId}, ${hold!.reservation_id}::uuid, 'commit', 10,
                                                    '2026-02-01T00:00:59.999Z')`,
    );
    expect(commit).toEqual({ outcome: 'expired', status: 'expired', used: 10 });
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 10, sum: 10 }]);
  });
});
