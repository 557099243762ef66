import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, holdOpen, statementsWaitingForLock } from '../support/databases.ts';

/**
 * The scheduled housekeeping beside rate-limited requests (review 31; migration 20261126001600).
 *
 * public.rate_limit_hit deleted up to 16 windows that had ended over a minute ago (skip locked: it then held them) and
 * then upserted its own key; public.rate_limit_prune, run by public.background_housekeeping (pg_cron every minute,
 * every POST /internal/drain, any number at once), deleted every ended window in scan order and waited for any row it
 * could not take. A client back after its window ended (the common case) then waited for the housekeeping, which held
 * its key, while the housekeeping waited for a row the client's delete held: a deadlock (40P01), and either the
 * request answered 500 INTERNAL or the whole housekeeping rolled back (and POST /internal/drain with it).
 *
 * The interleaving is made exact with a third transaction holding one ended window (X) meanwhile: the old prune
 * stopped there, holding the request's key (K), while the request took the row it deleted next (R). Windows: K ended
 * 10 s ago (the request's own), X and R over a minute ago, in table order K, X, R. Now the prune passes over what
 * another transaction holds and never waits, and the request takes its own key before any other row.
 */

const T0 = new Date('2026-05-01T12:00:00.000Z');

let t: TestApp;
let side: postgres.Sql;
let cron: postgres.Sql;

beforeAll(async () => {
  // The first sign-up opens the client's window at T0 - 70 s: it ended 10 s before T0.
  t = await startTestApp({ now: new Date(T0.getTime() - 70_000), env: { AUTH_RATE_LIMIT_PER_MINUTE: '30' } });
  side = postgres(t.databaseUrl!, { max: 1, onnotice: () => {} });
  cron = postgres(t.databaseUrl!, { max: 1, onnotice: () => {}, connection: { application_name: 'housekeeping-test-cron' } });
}, 60_000);

afterAll(async () => {
  await side?.end({ timeout: 1 });
  await cron?.end({ timeout: 1 });
  await t?.close();
});

/** Holds the window `key` in a transaction of its own until the returned release() is called. */
function hold(key: string): Promise<{ release(): Promise<void> }> {
  return holdOpen(side, (tx) => tx`select 1 from rate_limits where key = ${key} for update`);
}

describe('the housekeeping beside a rate-limited request whose window just ended', () => {
  it('neither deadlocks: the request is served and the housekeeping completes', async () => {
    const signUp1 = await t.http.post('/api/auth/sign-up/email', { json: { email: 'first@example.test', password: 'a long enough password', name: 'First' } });
    expect(signUp1.status, signUp1.text).toBe(200);
    const k = await first<{ key: string }>(t.db, sql`select key from rate_limits where key like 'sign-up|%'`);
    expect(k).toBeDefined();
    // Two windows that ended over a minute ago (other clients'), after K in the table.
    await side`insert into rate_limits (key, window_start, window_end, hits) values
               ('housekeeping-test|x', ${new Date(T0.getTime() - 360_000)}, ${new Date(T0.getTime() - 300_000)}, 1),
               ('housekeeping-test|r', ${new Date(T0.getTime() - 180_000)}, ${new Date(T0.getTime() - 120_000)}, 1)`;
    t.clock.set(T0);

    const x = await hold('housekeeping-test|x');
    let housekeeping: Promise<string> | undefined;
    let request: ReturnType<typeof t.http.post> | undefined;
    try {
      // The scheduler's run (pg_cron calls exactly this). Before the fix it took K and then waited at X.
      let swept: string | undefined;
      housekeeping = cron`select public.background_housekeeping(${T0})`.then(
        () => (swept = 'completed'),
        (err: { code?: string; message?: string }) => (swept = `failed: ${err.code} ${err.message}`),
      );
      await eventually(
        'the housekeeping is done or waits at X',
        async () => swept !== undefined || (await statementsWaitingForLock(t.db, '%background_housekeeping%')) === 1,
      );

      // The client comes back. Before the fix its request took R (skip locked passed over X) and waited for K.
      let answered = false;
      request = t.http.post('/api/auth/sign-up/email', { json: { email: 'second@example.test', password: 'a long enough password', name: 'Second' } });
      void request.finally(() => (answered = true));
      await eventually('the request is answered or waits for its key', async () => answered || (await statementsWaitingForLock(t.db, '%rate_limit_hit%')) === 1);
      // Now: the housekeeping never waited for X, so it was done before X was let go.
      expect(swept).toBe('completed');
    } finally {
      await x.release();
    }
    const [answer, swept] = await Promise.all([request!, housekeeping!]);
    const unhandled = t.logs.find((l) => l.msg === 'unhandled error') as { err?: { code?: string; message?: string } } | undefined;
    expect({ request: answer.status, housekeeping: swept, serverError: unhandled?.err && `${unhandled.err.code} ${unhandled.err.message}` }).toEqual({
      request: 200,
      housekeeping: 'completed',
      serverError: undefined,
    });
    // X, held during the run, is left for the next one; R and the request's old window are gone (K starts over).
    const left = await cron<{ key: string }[]>`select key from rate_limits where key like 'housekeeping-test|%' order by key`;
    expect(left.map((r) => r.key)).toEqual(['housekeeping-test|x']);
    await cron`select public.rate_limit_prune(${T0})`;
    expect(await cron`select key from rate_limits where key like 'housekeeping-test|%'`).toEqual([]);
  }, 30_000);

  it('a prune never waits for a window another transaction holds', async () => {
    await side`insert into rate_limits (key, window_start, window_end, hits) values
               ('housekeeping-test|held', ${new Date(T0.getTime() - 120_000)}, ${new Date(T0.getTime() - 60_000)}, 1),
               ('housekeeping-test|free', ${new Date(T0.getTime() - 120_000)}, ${new Date(T0.getTime() - 60_000)}, 1)`;
    const held = await hold('housekeeping-test|held');
    try {
      // Before the fix this waited for `held` until the test's timeout.
      const [row] = await cron<{ pruned: number }[]>`select public.rate_limit_prune(${T0}) as pruned`;
      expect(row!.pruned).toBeGreaterThanOrEqual(1);
      const left = await cron<{ key: string }[]>`select key from rate_limits where key like 'housekeeping-test|%' order by key`;
      expect(left.map((r) => r.key)).toEqual(['housekeeping-test|held']);
    } finally {
      await held.release();
    }
  }, 30_000);
});
