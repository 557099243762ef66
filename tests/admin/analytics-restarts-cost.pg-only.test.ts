import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp } from '../support/users.ts';
import { meteredAgent } from '../metering/support.ts';

/**
 * Whether a subscription is a restart is decided once, when it is written, not asked row by row at read time
 * (review 62): asked per row, each restart ever made cost every later analytics call about 0.5 ms, whatever its window,
 * and the count of "live before the window" probed every subscription ever created. The speed is the benchmark's to
 * show (scripts/bench/analytics.ts); this shows the shape: an analytics read calls no function per subscription, and
 * the stored marks say what the rule says. pg-only: per-function call counts (track_functions).
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-03-10T12:00:00Z' });
});
afterAll(() => t?.close());

describe('analytics and restarts: decided when written', () => {
  it('a read of the funnel and trends asks the restart rule about no row, and the marks are what the rule says', async () => {
    const agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 100 }]);
    const user = await signUp(t, { verified: true });
    for (let i = 0; i < 4; i++) {
      const started = await t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: agent.tierId } });
      expect(started.status, started.text).toBe(201);
      t.clock.advance(60_000);
      expect((await t.http.post(`/me/subscriptions/${agent.agentId}/cancel`, { cookie: user.cookie })).status).toBe(200);
      t.clock.advance(60_000);
    }
    const marks = await rows<{ purchaseOf: string | null; restarted: boolean; id: string }>(
      t.db,
      sql`select id, purchase_of as "purchaseOf", restarted from subscriptions where agent_id = ${agent.agentId} order by created_at`,
    );
    const head = marks[0]!.id;
    expect(marks.map((m) => ({ purchaseOf: m.purchaseOf, restarted: m.restarted }))).toEqual([
      { purchaseOf: null, restarted: true },
      { purchaseOf: head, restarted: true },
      { purchaseOf: head, restarted: true },
      { purchaseOf: head, restarted: false },
    ]);
    const calls = await t.db.transaction().execute(async (trx) => {
      await sql`set local track_functions = 'all'`.execute(trx);
      await sql`set local max_parallel_workers_per_gather = 0`.execute(trx);
      await sql`select * from public.admin_analytics_funnel('2026-03-01', '2026-03-31', null)`.execute(trx);
      await sql`select * from public.admin_analytics_trends('2026-03-01', '2026-03-31', null)`.execute(trx);
      return first<{ n: number | null }>(
        trx,
        sql`select pg_stat_get_xact_function_calls('public.subscription_is_restart(public.subscriptions, public.subscriptions)'::regprocedure)::int as n`,
      );
    });
    expect(calls!.n ?? 0).toBe(0);
  });
});
