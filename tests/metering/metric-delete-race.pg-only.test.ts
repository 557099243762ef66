import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { reserve } from './reservation-support.ts';
import { meter, meteredAgent, reqId, subscribe } from './support.ts';

/**
 * Review 90: an agent backend's first call on a metric while an admin deletes that metric (nobody has used it yet, so
 * the delete is allowed). The call has read the metric and its counter's insert waits on the delete's lock; when the
 * delete commits, the insert fails its foreign key (23503), and the agent got 500 INTERNAL. pg-only: the interleaving
 * needs two connections (the delete's transaction is held open while the call waits on it).
 */
let t: TestApp;
let user: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  user = await signUp(t);
});
afterAll(() => t.close());

describe('a usage call racing the deletion of its metric', () => {
  it.each([
    ['an increment', (agentId: string) => meter(t, user, agentId, 'calls', 'increment', { clientReqId: reqId() })],
    ['a reserve', (agentId: string) => reserve(t, user, agentId, 'calls', { clientReqId: reqId(), amount: 2 })],
  ])('%s answers 404 NOT_FOUND for the metric the delete took, not 500, and counts nothing', async (_, call) => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'fixed', quota: 10 }]);
    const subscription = await subscribe(t, user.userId, a.tierId);
    let answer: ReturnType<typeof call> | undefined;
    await t.db.transaction().execute(async (trx) => {
      // As deleteMetricDefinition (functions/metering/metric-definitions.ts) runs: the metric locked, then deleted.
      await sql`select 1 from public.metric_definitions where id = ${a.metrics.calls} for update`.execute(trx);
      answer = call(a.agentId);
      // until the call waits on the delete's lock
      for (;;) {
        const { rows } = await sql`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`.execute(t.db);
        if (rows.length > 0) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      await sql`delete from public.tier_quotas where metric_id = ${a.metrics.calls}`.execute(trx);
      await sql`delete from public.metric_definitions where id = ${a.metrics.calls}`.execute(trx);
    });
    const res = await answer!;
    expect([res.status, res.body?.error?.code], res.text).toEqual([404, 'NOT_FOUND']);
    const { rows } = await sql<{ n: number }>`select (select count(*) from usage_counters where subscription_id = ${subscription.id})
                                                   + (select count(*) from quota_ledger where subscription_id = ${subscription.id}) as n`.execute(t.db);
    expect(Number(rows[0]!.n)).toBe(0);
  });
});
