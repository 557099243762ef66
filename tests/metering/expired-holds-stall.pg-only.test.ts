import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { clientOfAgent } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { agentToken, insertUser, meter, meteredAgent, reqId, subscribe, type MeteredAgent } from './support.ts';

/**
 * docs/security.md rule 17: an agent cannot stall other agents' usage calls by letting many holds expire at once
 * (found by a hostile review, review 42; migration 20261126002000_expired_holds_settle_within_a_budget.sql).
 *
 * A reserve settles expired holds of its counter inside the group commit's transaction (up to 500 calls; two
 * transactions in flight per instance). Each reserve settled at most 100, but first gathered the ids of EVERY expired
 * hold of its counter, and its quota check summed the live holds through an index that walked the expired ones too;
 * and 100 was a bound per call, not per batch: a batch of 500 reserves on a counter with N expired holds walked N,
 * N-100, ... ids and wrote up to 50,000 `expired` ledger rows before it answered, and every other agent's usage call
 * waited behind it (3.6 s here, 6.8-9.4 s in the review, against 12 ms alone). Now a reserve reads only the expired
 * holds it settles (an index in expiry order, under a limit), and a transaction settles at most 1,000 in all; the rest
 * wait for later transactions or the housekeeping's sweep. Several connections at once: PostgreSQL only. How long the
 * other agent's calls wait is measured, never asserted (a timed assertion failed on a loaded 2-core machine: 1,035 ms
 * for the first call of the wave in a full run): the bound that keeps it short is the per-transaction budget, asserted
 * exactly by the second test; scripts/bench/expired-holds.ts prints what a reserve costs.
 */

let t: TestApp;
let attacker: MeteredAgent;
let victimAgent: MeteredAgent;
const holders: TestUser[] = [];
let victimUser: TestUser;

const HOLDS = 60_000;
const RESERVES_PER_COUNTER = 500;

/** What `reserve { amount: 1 }` leaves behind when the agent never settles: `n` expired holds on the counter (made in
 *  SQL, as tests/metering/reservations.test.ts does, to keep the test short). */
async function expiredHolds(subscriptionId: string, metricId: string, n: number, expiredAt: Date): Promise<void> {
  await sql`insert into usage_reservations (subscription_id, metric_id, counter_key, period_start, client_req_id, amount,
                                            ttl_seconds, status, expires_at, created_at)
            select ${subscriptionId}, ${metricId}, '-infinity', ${t.clock.now()}, 'old-' || i, 1, 1, 'held',
                   ${expiredAt}, ${new Date(expiredAt.getTime() - 1_000)}
            from generate_series(1, ${n}) i`.execute(t.db);
}

beforeAll(async () => {
  t = await startTestApp({ now: '2026-03-10T12:00:00.000Z' });
  attacker = await meteredAgent(t.db, [{ slug: 'jobs', kind: 'fixed', quota: null }]);
  victimAgent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 1000 }]);
  victimUser = await signUp(t);
  await subscribe(t, victimUser.userId, victimAgent.tierId);
  await agentToken(t, victimUser, victimAgent.agentId);
  for (let i = 0; i < 2; i++) {
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, attacker.tierId);
    await agentToken(t, u, attacker.agentId);
    holders.push(u);
    await expiredHolds(sub.id, attacker.metrics.jobs!, HOLDS, new Date(t.clock.now().getTime() - 1_000));
  }
  await sql`analyze usage_reservations`.execute(t.db);
}, 120_000);
afterAll(() => t.close());

describe("attack: a wave of reserves on counters full of expired holds stalls every agent's usage calls", () => {
  it("another agent's increments are all answered while the attacker's reserves run, and so are the reserves", async () => {
    expect((await meter(t, victimUser, victimAgent.agentId, 'calls', 'increment', { clientReqId: reqId() })).status).toBe(200);

    // The attacker's backend: RESERVES_PER_COUNTER reserves of 1 unit on each of its two users' counters, all at once.
    const tokens = await Promise.all(holders.map((u) => agentToken(t, u, attacker.agentId)));
    const attack = Promise.all(
      holders.flatMap((_, i) =>
        Array.from({ length: RESERVES_PER_COUNTER }, () =>
          t.http.post(`/me/usage/${attacker.agentId}/jobs/reservations`, {
            bearer: tokens[i]!,
            json: { clientReqId: reqId(), amount: 1, ttlSeconds: 1 },
          }),
        ),
      ),
    );
    // Another agent's backend keeps metering its own user meanwhile, one call every 100 ms.
    const victims: number[] = [];
    let done = false;
    void attack.finally(() => (done = true));
    while (!done) {
      await new Promise((r) => setTimeout(r, 100));
      victims.push((await meter(t, victimUser, victimAgent.agentId, 'calls', 'increment', { clientReqId: reqId() })).status);
    }
    const answered = await attack;
    // Measured when the budget was built (2-core VM, PostgreSQL 15): 12-19 ms alone; without the budget 3.6 s and 9.8 s
    // for the first calls made during the wave, growing with the holds the agent let expire; with it 0.26-0.46 s, the
    // wave's batches of 500 reserves themselves.
    expect(victims.length).toBeGreaterThan(0);
    expect(victims.every((status) => status === 200)).toBe(true);
    // and the attacker's own reserves are all answered too
    expect(answered.map((r) => r.status).filter((status) => status !== 201)).toEqual([]);
  }, 180_000);

  it('one batch settles at most 1,000 expired holds, whatever its reserves; later batches and the sweep settle the rest', async () => {
    const agent = await meteredAgent(t.db, [{ slug: 'jobs', kind: 'fixed', quota: null }]);
    const client = await clientOfAgent(t, agent.agentId);
    const now = t.clock.now();
    // older than the first test's holds, so the sweep (oldest first, across every counter) takes these first
    const expiredAt = new Date(now.getTime() - 3_600_000);
    const users: string[] = [];
    const subs: string[] = [];
    for (let i = 0; i < 2; i++) {
      const userId = await insertUser(t.db);
      const sub = await subscribe(t, userId, agent.tierId);
      await expiredHolds(sub.id, agent.metrics.jobs!, 1_500, expiredAt);
      users.push(userId);
      subs.push(sub.id);
    }

    /** One batch as the service sends it: 250 reserves of 1 unit on each user's counter. */
    const batch = () => {
      const calls = users.flatMap((userId) => Array.from({ length: 250 }, () => userId));
      return rows<{ caller_status: string; outcome: string; reserved: number }>(
        t.db,
        sql`select caller_status, outcome, reserved::int as reserved from public.metering_batch_as_bearer(
              p_operations => ${calls.map(() => 'reserve')}::text[], p_user_ids => ${calls}::text[],
              p_token_keys => ${calls.map(() => 'k')}::text[], p_issued_ats => ${calls.map(() => now.toISOString())}::text[]::timestamptz[],
              p_client_ids => ${calls.map(() => client.clientId)}::text[], p_token_agent_ids => ${calls.map(() => agent.agentId)}::text[]::uuid[],
              p_agent_ids => ${calls.map(() => agent.agentId)}::text[]::uuid[], p_metric_slugs => ${calls.map(() => 'jobs')}::text[],
              p_client_req_ids => ${calls.map(() => reqId())}::text[], p_amounts => ${calls.map(() => '1')}::text[]::bigint[],
              p_nows => ${calls.map(() => now.toISOString())}::text[]::timestamptz[],
              p_reservation_ids => ${calls.map(() => null)}::text[]::uuid[], p_ttl_seconds => ${calls.map(() => '3600')}::text[]::integer[])`,
      );
    };
    const settled = async () => {
      const row = await first<{ holds: number; ledger: number }>(
        t.db,
        sql`select (select count(*)::int from usage_reservations where subscription_id = any (${subs}::uuid[]) and status = 'expired') as holds,
                   (select count(*)::int from quota_ledger where subscription_id = any (${subs}::uuid[]) and event = 'expired') as ledger`,
      );
      return row!;
    };

    const one = await batch();
    expect(one.map((r) => [r.caller_status, r.outcome]).every(([caller, outcome]) => caller === 'ok' && outcome === 'ok')).toBe(true);
    // the quota check counts live holds only, settled or not: each user's last reserve sees its own 250
    expect(Math.max(...one.map((r) => r.reserved))).toBe(250);
    // 500 reserves, each allowed 100 (before: all 3,000 settled inside this one batch), settled 1,000 in all
    expect(await settled()).toEqual({ holds: 1_000, ledger: 1_000 });

    // the next transaction has a budget of its own
    expect((await batch()).every((r) => r.outcome === 'ok')).toBe(true);
    expect(await settled()).toEqual({ holds: 2_000, ledger: 2_000 });

    // and the housekeeping's sweep settles the rest
    await first(t.db, sql`select public.metering_expire_reservations(${now}, 1000)`);
    expect(await settled()).toEqual({ holds: 3_000, ledger: 3_000 });
  }, 60_000);
});
