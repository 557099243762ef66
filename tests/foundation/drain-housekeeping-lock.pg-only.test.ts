import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import { mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';

/**
 * Review 25: POST /internal/drain (how mail and webhooks leave on Supabase) ran the SQL housekeeping first and started
 * the outboxes only after it. The housekeeping waits for row locks (it prunes expired sessions, taking their users
 * FOR KEY SHARE) up to statement_timeout (30 s): while a password change, a ban or a claim held a user's row, no mail
 * and no webhook went out, although they need nothing from it. Now every part of the drain runs side by side.
 * Several connections at once: PostgreSQL only.
 */

const TOKEN = 'drain-token-for-housekeeping-lock-0123456789';
let t: TestApp;
let locker: postgres.Sql;
beforeAll(async () => {
  t = await startTestApp({ env: { DRAIN_TOKEN: TOKEN } });
  locker = postgres(t.databaseUrl!, { max: 1, onnotice: () => {} });
});
afterAll(async () => {
  await locker?.end();
  await t?.close();
});

describe('a drain whose housekeeping waits for a row lock', () => {
  it('sends the queued mail meanwhile, and answers 200 once the housekeeping is done', async () => {
    // A user with an expired session: the housekeeping will want that user's row. (Ten minutes: it runs 5 minutes
    // behind the database's clock.)
    const user = await signUp(t);
    await sql`update "session" set "expiresAt" = now() - interval '10 minutes' where "userId" = ${user.userId}`.execute(t.db);
    // Another transaction holds the user's row, as a password change or a ban does.
    const held = await holdOpen(locker, (tx) => tx`select 1 from "user" where id = ${user.userId} for update`);
    await t.deps.mailer.enqueue(t.db, { to: 'not-held-back@example.test', subject: 'Unrelated', text: 'x' });
    const drained = t.http.post('/internal/drain', { bearer: TOKEN });
    try {
      await eventually('the housekeeping waits for the user row', async () => (await statementsWaitingForLock(t.db, '%background_housekeeping%')) === 1);
      await eventually('the mail went out while the housekeeping waits', async () => (await mailsTo(t, 'not-held-back@example.test'))[0]!.status === 'logged');
    } finally {
      await held.release();
    }
    const res = await drained;
    expect(res.status, res.text).toBe(200);
    expect(res.body.data.failed).toEqual([]);
    expect(res.body.data.housekeeping.sessionsPruned).toBeGreaterThanOrEqual(1);
  }, 60_000);
});
