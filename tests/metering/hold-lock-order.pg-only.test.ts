import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql, type Db } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, statementsWaitingForLock } from '../support/databases.ts';
import { ledgerAgreesWithCounters, insertUser, meteredAgent, subscribe } from './support.ts';

/**
 * Every usage write locks the counter before its holds, and the group commit sorts a batch's calls by counter, so two
 * batches never wait for each other in a cycle (migration 20261126000200). The attack: an agent reads its own expired
 * hold in one batch, which then commits another hold of the same counter, while a second batch commits the expired
 * hold. If the read settled the hold without the counter's lock, the batches deadlocked and PostgreSQL aborted one of
 * them (every call in it retried one by one): three cheap requests stalled an instance's batches. Two transactions
 * stand for the two batches, as the batch function runs its calls in one. Two connections at once: PostgreSQL only.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-01-31T10:00:00.000Z' });
});
afterAll(() => t.close());

interface Reservation {
  outcome: string;
  replayed: boolean;
  reservation_id: string;
  status: string;
}

const reserve = (db: Db, who: { userId: string; agentId: string }, key: string, now: string) =>
  first<Reservation>(db, sql`select * from public.metering_reserve(${who.userId}, ${who.agentId}, 'calls', ${key}, 5, 60, ${now}::timestamptz)`);
const settle = (db: Db, who: { userId: string; agentId: string }, id: string, action: 'read' | 'commit', now: string) =>
  first<Reservation>(
    db,
    sql`select * from public.metering_settle_reservation(${who.userId}, ${who.agentId}, ${id}::uuid, ${action},
                                                         ${action === 'commit' ? 3 : null}::bigint, ${now}::timestamptz)`,
  );

/** Runs `first` in a transaction; while it is open, `second` (another connection) must be waiting for a lock. */
async function besideAnother<T>(first: (trx: Db) => Promise<void>, second: () => Promise<T>, then: (trx: Db) => Promise<void>): Promise<T> {
  let other: Promise<T> | undefined;
  await t.db.transaction().execute(async (trx) => {
    await first(trx);
    other = second();
    other.catch(() => {}); // awaited below
    await eventually('the other batch waits', async () => (await statementsWaitingForLock(t.db, '%metering_%')) > 0);
    await then(trx);
  });
  return other!;
}

describe('settling an expired hold takes the counter first', () => {
  it('attack: reading an expired hold, then committing another, beside a commit of the expired one: no deadlock', async () => {
    const who = { userId: await insertUser(t.db), agentId: '' };
    const agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 100 }]);
    who.agentId = agent.agentId;
    const sub = await subscribe(t, who.userId, agent.tierId);
    const expiring = await reserve(t.db, who, 'r-1', '2026-02-01T00:00:00Z'); // expires 00:01:00
    const live = await reserve(t.db, who, 'r-2', '2026-02-01T00:00:30Z'); // expires 00:01:30
    const now = '2026-02-01T00:01:10Z';

    const lateCommit = await besideAnother(
      async (batchA) => expect(await settle(batchA, who, expiring!.reservation_id, 'read', now)).toMatchObject({ outcome: 'ok', status: 'expired' }),
      () => settle(t.db, who, expiring!.reservation_id, 'commit', now),
      async (batchA) => expect(await settle(batchA, who, live!.reservation_id, 'commit', now)).toMatchObject({ outcome: 'ok', status: 'committed' }),
    );
    expect(lateCommit).toMatchObject({ outcome: 'expired', status: 'expired' });
    const counters = await ledgerAgreesWithCounters(t.db, sub.id);
    expect(counters).toEqual([{ used: 3, sum: 3 }]);
  });

  it('attack: replaying the reserve of an expired hold, then committing another, beside a commit of the expired one', async () => {
    const who = { userId: await insertUser(t.db), agentId: '' };
    const agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 100 }]);
    who.agentId = agent.agentId;
    const sub = await subscribe(t, who.userId, agent.tierId);
    const expiring = await reserve(t.db, who, 'r-1', '2026-02-01T00:00:00Z');
    const live = await reserve(t.db, who, 'r-2', '2026-02-01T00:00:30Z');
    const now = '2026-02-01T00:01:10Z';

    const lateCommit = await besideAnother(
      async (batchA) => expect(await reserve(batchA, who, 'r-1', now)).toMatchObject({ outcome: 'ok', replayed: true, status: 'expired' }),
      () => settle(t.db, who, expiring!.reservation_id, 'commit', now),
      async (batchA) => expect(await settle(batchA, who, live!.reservation_id, 'commit', now)).toMatchObject({ outcome: 'ok', status: 'committed' }),
    );
    expect(lateCommit).toMatchObject({ outcome: 'expired', status: 'expired' });
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 3, sum: 3 }]);
  });
});
