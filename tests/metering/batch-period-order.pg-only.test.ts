import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, statementsWaitingForLock } from '../support/databases.ts';
import { clientOfAgent } from '../support/oauth.ts';
import { insertUser, ledgerAgreesWithCounters, meteredAgent, subscribe } from './support.ts';

/**
 * Two group-commit batches with commits of holds on both sides of a user's period boundary (migration
 * 20261126001100, found by a hostile review). A rolling metric has a counter per period and a commit locks its
 * hold's; the batch ordered commits (which have no clientReqId) by arrival, so [new, old] in one batch beside
 * [old, new] in another locked the two counters in opposite orders and PostgreSQL ended one batch as a deadlock,
 * stalling every other call in both for deadlock_timeout. The interleaving is made exact: a third transaction holds
 * the new period's counter; batch B ([new2, old2] as sent) is started, then batch A ([old1, new1]); then the third
 * lets go. Three connections at once: PostgreSQL only.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-01-31T10:00:00.000Z' }); // a free cycle: periods start on the 28th of Feb at 10:00, ...
});
afterAll(() => t.close());

describe('commits across a period boundary in two batches', () => {
  it('attack: [new, old] beside [old, new] lock the counters in one order: both batches go through', async () => {
    const userId = await insertUser(t.db);
    const agent = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'rolling', quota: 1000 }]);
    const sub = await subscribe(t, userId, agent.tierId);
    const client = await clientOfAgent(t, agent.agentId);
    const reserve = async (key: string, now: string) =>
      (await first<{ reservation_id: string; period_start: Date }>(
        t.db,
        sql`select reservation_id, period_start from public.metering_reserve(${userId}, ${agent.agentId}, 'tokens', ${key}, 5, 3600, ${now}::timestamptz)`,
      ))!;
    // holds in the last hour of the period, and just after it ended
    const [old1, old2] = [await reserve('old-1', '2026-02-28T09:30:00Z'), await reserve('old-2', '2026-02-28T09:31:00Z')];
    const [new1, new2] = [await reserve('new-1', '2026-02-28T10:05:00Z'), await reserve('new-2', '2026-02-28T10:06:00Z')];
    expect([old1.period_start.toISOString(), new1.period_start.toISOString()]).toEqual(['2026-01-31T10:00:00.000Z', '2026-02-28T10:00:00.000Z']);

    /** One batch of commits, as the service sends it (its order is the batch function's business). */
    const batch = (ids: string[]) =>
      rows<{ call_index: number; caller_status: string; outcome: string }>(
        t.db,
        sql`select call_index, caller_status, outcome from public.metering_batch_as_bearer(
              p_operations => ${ids.map(() => 'commit')}::text[], p_user_ids => ${ids.map(() => userId)}::text[],
              p_token_keys => ${ids.map(() => 'k')}::text[], p_issued_ats => ${ids.map(() => '2026-02-28T10:00:00Z')}::text[]::timestamptz[],
              p_client_ids => ${ids.map(() => client.clientId)}::text[], p_token_agent_ids => ${ids.map(() => agent.agentId)}::text[]::uuid[],
              p_agent_ids => ${ids.map(() => agent.agentId)}::text[]::uuid[], p_metric_slugs => ${ids.map(() => null)}::text[],
              p_client_req_ids => ${ids.map(() => null)}::text[], p_amounts => ${ids.map(() => '1')}::text[]::bigint[],
              p_nows => ${ids.map(() => '2026-02-28T10:10:00Z')}::text[]::timestamptz[],
              p_reservation_ids => ${ids}::text[]::uuid[], p_ttl_seconds => ${ids.map(() => null)}::text[]::integer[])`,
      );
    const waiting = () => statementsWaitingForLock(t.db, '%metering_batch_as_bearer%');

    let batches: Array<Promise<unknown>> = [];
    await t.db.transaction().execute(async (trx) => {
      await sql`select 1 from usage_counters where subscription_id = ${sub.id} and period_start = ${new1.period_start} for update`.execute(trx);
      const b = batch([new2.reservation_id, old2.reservation_id]);
      b.catch(() => {});
      await eventually('batch B waits', async () => (await waiting()) >= 1);
      const a = batch([old1.reservation_id, new1.reservation_id]);
      a.catch(() => {});
      await eventually('batch A waits', async () => (await waiting()) >= 2);
      batches = [a, b];
    });
    const settled = await Promise.allSettled(batches);
    expect(settled.map((s) => (s.status === 'fulfilled' ? 'ok' : String((s.reason as Error).message)))).toEqual(['ok', 'ok']);
    for (const s of settled) {
      const answered = (s as PromiseFulfilledResult<Array<{ caller_status: string; outcome: string }>>).value;
      expect(answered.map((r) => [r.caller_status, r.outcome])).toEqual([
        ['ok', 'ok'],
        ['ok', 'ok'],
      ]);
    }
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([
      { used: 2, sum: 2 },
      { used: 2, sum: 2 },
    ]);
  });
});
