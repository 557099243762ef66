import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertUser, meteredAgent, subscribe } from './support.ts';

/**
 * The SQL function behind incrementUsage, called directly: what a transaction that fails around it leaves behind,
 * and that time is its parameter (the service's clock), never the database's now().
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-01-31T10:00:00.000Z' });
});
afterAll(() => t.close());

interface Row {
  outcome: string;
  replayed: boolean;
  used: number;
  period_start: Date;
}

const call = (db: TestApp['db'], userId: string, agentId: string, key: string, now: string) =>
  first<Row>(db, sql`select * from public.metering_increment(${userId}, ${agentId}, 'calls', ${key}, 1, ${now}::timestamptz)`);

describe('metering_increment', () => {
  it('leaves no idempotency key behind when the surrounding transaction fails: a retry counts afresh', async () => {
    const userId = await insertUser(t.db);
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    await subscribe(t, userId, a.tierId);
    await expect(
      t.db.transaction().execute(async (trx) => {
        const inside = await call(trx, userId, a.agentId, 'k-1', '2026-02-01T00:00:00Z');
        expect(inside).toMatchObject({ outcome: 'ok', replayed: false, used: 1 });
        throw new Error('the caller failed after counting');
      }),
    ).rejects.toThrow('the caller failed after counting');
    const retry = await call(t.db, userId, a.agentId, 'k-1', '2026-02-01T00:00:00Z');
    expect(retry).toMatchObject({ outcome: 'ok', replayed: false, used: 1 });
    expect(await call(t.db, userId, a.agentId, 'k-1', '2026-02-01T00:00:00Z')).toMatchObject({ outcome: 'ok', replayed: true, used: 1 });
  });

  it('counts in the billing period of the time it is given, whatever the database clock says', async () => {
    const userId = await insertUser(t.db);
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    await subscribe(t, userId, a.tierId);
    const far = await call(t.db, userId, a.agentId, 'k-far', '2031-06-15T00:00:00Z');
    expect(far).toMatchObject({ outcome: 'ok', used: 1 });
    expect(far!.period_start.toISOString()).toBe('2031-05-31T10:00:00.000Z');
    const early = await call(t.db, userId, a.agentId, 'k-early', '2026-02-10T00:00:00Z');
    expect(early).toMatchObject({ outcome: 'ok', used: 1 });
    expect(early!.period_start.toISOString()).toBe('2026-01-31T10:00:00.000Z');
    const ledger = await first<{ created_at: Date }>(t.db, sql`select created_at from quota_ledger where client_req_id = 'k-far'`);
    expect(ledger!.created_at.toISOString()).toBe('2031-06-15T00:00:00.000Z');
  });
});
