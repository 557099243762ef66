import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp } from '../support/users.ts';

/**
 * A sign-in racing a ban (review 17): the auth library reads the ban, then inserts the session; a ban committing in
 * between deleted the sessions it could see and left the new one alive, usable at the library's own endpoints, which do
 * not check the ban again. Migration 20261127003600: the session's insert reads the account FOR SHARE, so it waits for
 * the ban and then refuses (503, send again; then the library's 403). The interleaving is made exact with a
 * connection of the test's own holding the ban open: PostgreSQL only.
 */
let t: TestApp;
let other: postgres.Sql;
beforeAll(async () => {
  t = await startTestApp();
  other = postgres(t.databaseUrl!, { max: 1, onnotice: () => {} });
});
afterAll(async () => {
  await other?.end({ timeout: 1 });
  await t?.close();
});

const sessionsOf = async (userId: string) =>
  (await first<{ n: number }>(t.db, sql`select count(*)::int as n from "session" where "userId" = ${userId}`))!.n;

describe('a sign-in beside a ban', () => {
  it('attack: the account signs in while an admin bans it; no session of the banned account is left', async () => {
    const user = await signUp(t);
    const before = await sessionsOf(user.userId);
    // The ban as the admin plugin writes it, its transaction held open by the test.
    const ban = await holdOpen(other, (tx) => tx`update "user" set banned = true, "banReason" = 'spam' where id = ${user.userId}`);
    const signingIn = t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password: user.password } });
    let settled = false;
    void signingIn.finally(() => (settled = true));
    let waiting = false;
    for (let i = 0; i < 200 && !settled && !waiting; i++) {
      waiting = (await statementsWaitingForLock(t.db, '%session%')) > 0;
      if (!waiting) await new Promise((r) => setTimeout(r, 25));
    }
    await ban.release();
    const res = await signingIn;
    expect({ waited: waiting, status: res.status, code: res.body?.error?.code }).toEqual({
      waited: true,
      status: 503,
      code: 'UNAVAILABLE',
    });
    // The ban deleted the sessions it saw (the sign-up's), and none was made after it.
    expect([before > 0, await sessionsOf(user.userId)]).toEqual([true, 0]);

    const again = await t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password: user.password } });
    expect(again.status).toBe(403);
    expect(await sessionsOf(user.userId)).toBe(0);
  });
});
