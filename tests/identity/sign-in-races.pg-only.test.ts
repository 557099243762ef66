import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp } from '../support/users.ts';

/**
 * Sign-ins racing a change of the account's credentials, each interleaving made exact with a connection of the test's
 * own holding the change open: PostgreSQL only.
 *
 * A ban (review 17): the auth library reads the ban, then inserts the session; a ban committing in between deleted the
 * sessions it could see and left the new one alive, usable at the library's own endpoints, which do not check the ban
 * again. Migration 20261127003600: the session's insert reads the account FOR SHARE, so it waits for the ban and then
 * refuses (503, send again; then the library's 403).
 *
 * A password change or reset (review 24, finding 1; contract.md, Trust boundaries: "A password reset or change ends
 * every session ... of the user"): the library reads the password hash, checks it, then inserts the session;
 * public.revoke_user_credentials (the password trigger) deletes the sessions it can see, and the session the sign-in
 * inserted once the change had committed was left alive. Here the session's insert waits on the change's lock of the
 * user's row: it goes through once the change commits, and the sign-in then finds its password changed
 * (functions/auth/sign-in-password-stands.ts). The window where nothing waits (the change commits while the password
 * is checked) is tests/identity/sign-in-beside-password-change.test.ts, on both tiers.
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

describe('a sign-in with the old password beside a password change', () => {
  it('attack: a thief holding the old password signs in while the owner changes it; the sign-in is refused as a wrong password and no session is left', async () => {
    const owner = await signUp(t);
    const newHash = await (await t.deps.auth.$context).password.hash('the owner new password 1');
    // The password write as every path makes it (change, reset, a purchase claim): the trigger ends every
    // credential in the same transaction, held open by the test.
    const change = await holdOpen(
      other,
      (tx) => tx`update account set password = ${newHash} where "userId" = ${owner.userId} and "providerId" = 'credential'`,
    );
    const thief = t.http.post('/api/auth/sign-in/email', { json: { email: owner.email, password: owner.password } });
    let settled = false;
    void thief.finally(() => (settled = true));
    let waiting = false;
    for (let i = 0; i < 200 && !settled && !waiting; i++) {
      waiting = (await statementsWaitingForLock(t.db, '%session%')) > 0;
      if (!waiting) await new Promise((r) => setTimeout(r, 25));
    }
    await change.release();
    const res = await thief;
    expect({
      insertWaitedForTheChange: waiting,
      signIn: res.status,
      code: res.body?.code,
      cookies: res.headers.getSetCookie(),
      sessionsLeft: await sessionsOf(owner.userId),
    }).toEqual({ insertWaitedForTheChange: true, signIn: 401, code: 'INVALID_EMAIL_OR_PASSWORD', cookies: [], sessionsLeft: 0 });
    // The old password no longer signs in afterwards; the new one does (control).
    expect((await t.http.post('/api/auth/sign-in/email', { json: { email: owner.email, password: owner.password } })).status).toBe(401);
    expect((await t.http.post('/api/auth/sign-in/email', { json: { email: owner.email, password: 'the owner new password 1' } })).status).toBe(200);
  });
});
