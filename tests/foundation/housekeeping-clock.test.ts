import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { commit, getReservation, reserve } from '../metering/reservation-support.ts';
import { meteredAgent, reqId, subscribe } from '../metering/support.ts';

/**
 * Review 99: a hold's expiry and a rate-limit window's end are written and judged at the service instance's clock, and
 * the housekeeping (POST /internal/drain, the pg_cron job, the Node loop) ran at the database's now(): with an
 * instance's clock behind the database's, a drain expired that instance's holds while they were live by every rule the
 * agent sees (its commit inside the ttl answered 422 INVALID_STATE, the user's work was never counted) and deleted its
 * running per-minute windows (the limit started again after every drain). The housekeeping now runs 5 minutes behind
 * the database's clock (migration 20261127007000); these instances run 2 minutes behind it.
 */
const TOKEN = 'drain-token-for-tests-0123456789abcdef';
const BEHIND_MS = 2 * 60_000;
let t: TestApp;
let u: TestApp;
let user: TestUser;
beforeAll(async () => {
  const env = { DRAIN_TOKEN: TOKEN, AUTH_RATE_LIMIT_PER_MINUTE: '3' };
  t = await startTestApp({ now: new Date(Date.now() - BEHIND_MS), env });
  // A second instance on the same database, as far behind (its rate-limit refusals are not cached in the first's memory).
  u = await startTestApp({ now: t.clock.now(), env, testDatabase: { database: t.database, url: t.databaseUrl, drop: async () => {} } });
  user = await signUp(t);
});
afterAll(async () => {
  await u?.close();
  await t?.close();
});

describe('the housekeeping and instances whose clock is behind the database', () => {
  it('a hold inside its ttl by the clock it was made with survives a drain and is committed', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'rolling', quota: 10 }]);
    await subscribe(t, user.userId, a.tierId);
    const held = await reserve(t, user, a.agentId, 'tokens', { clientReqId: reqId(), amount: 4, ttlSeconds: 60 });
    expect(held.status, held.text).toBe(201);
    const id = held.body.data.id as string;

    const drained = await t.http.post('/internal/drain', { bearer: TOKEN });
    expect(drained.status, drained.text).toBe(200);

    t.clock.advance(1_000); // 59 s of its ttl left
    expect((await getReservation(t, user, a.agentId, id)).body.data.status).toBe('held');
    const done = await commit(t, user, a.agentId, id, 3);
    expect(done.status, done.text).toBe(200);
    expect(done.body.data).toMatchObject({ status: 'committed', committedAmount: 3 });
  });

  it('a hold it does expire is stamped when the drain noticed it, not 5 minutes back (its ledger row, whose time the reservation.expired event carries)', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'rolling', quota: 10 }]);
    const buyer = await signUp(t);
    await subscribe(t, buyer.userId, a.tierId);
    const held = await reserve(t, buyer, a.agentId, 'tokens', { clientReqId: reqId(), amount: 2, ttlSeconds: 60 });
    expect(held.status, held.text).toBe(201);
    const id = held.body.data.id as string;
    await sql`update public.usage_reservations set expires_at = now() - interval '10 minutes' where id = ${id}`.execute(t.db);
    const before = (await first<{ now: Date }>(t.db, sql`select now() as now`))!.now;

    const drained = await t.http.post('/internal/drain', { bearer: TOKEN });
    expect(drained.status, drained.text).toBe(200);
    const row = await first<{ status: string; settled_at: Date; ledger_at: Date }>(
      t.db,
      sql`select r.status, r.settled_at,
                 (select l.created_at from public.quota_ledger l
                   where l.event = 'expired' and l.details->>'reservationId' = r.id::text) as ledger_at
            from public.usage_reservations r where r.id = ${id}`,
    );
    expect(row!.status).toBe('expired');
    expect(new Date(row!.settled_at).getTime()).toBeGreaterThanOrEqual(new Date(before).getTime());
    expect(new Date(row!.ledger_at).getTime()).toBeGreaterThanOrEqual(new Date(before).getTime());
  });

  it("a drain leaves a running per-minute window alone: the address's limit holds on every instance", async () => {
    const signIn = (app: TestApp) => app.http.post('/api/auth/sign-in/email', { json: { email: `nobody-${reqId()}@example.test`, password: 'wrong wrong wrong' } });
    // The address's 3 of this minute (the sign-up above used some of them), then refused.
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await signIn(t)).status);
    expect(statuses.at(-1)).toBe(429);

    const drained = await t.http.post('/internal/drain', { bearer: TOKEN });
    expect(drained.status, drained.text).toBe(200);

    t.clock.advance(1_000);
    u.clock.set(t.clock.now());
    expect((await signIn(u)).status, '59 s of the window left').toBe(429);
  });
});
