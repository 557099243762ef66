import { verifyPassword } from 'better-auth/crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { testPasswordHashing } from '../support/password-hashing.ts';
import { signUp } from '../support/users.ts';

/**
 * The rest of the suite hashes passwords cheaply (tests/support/password-hashing.ts); this file shows what an app built
 * as every entry point builds it stores: the library's own scrypt hash (salt:key, N=16384), which the library's check
 * accepts for the password and refuses for another, and that a cheap test hash is refused there.
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ libraryPasswordHashing: true });
});
afterAll(() => t.close());

const storedHash = async (userId: string) =>
  (await first<{ hash: string }>(t.db, sql`select password as hash from account where "userId" = ${userId} and "providerId" = 'credential'`))!.hash;

describe('password hashing as served', () => {
  it("stores the library's scrypt hash of the password, and signs in with it", async () => {
    const user = await signUp(t); // signs up, then signs in with the password
    const hash = await storedHash(user.userId);
    expect(hash).toMatch(/^[0-9a-f]{32}:[0-9a-f]{128}$/);
    expect(await verifyPassword({ hash, password: user.password })).toBe(true);
    expect(await verifyPassword({ hash, password: `${user.password}x` })).toBe(false);
  });

  it("refuses a sign-in against a hash in the tests' cheap form", async () => {
    const user = await signUp(t);
    const cheap = await testPasswordHashing.hash(user.password);
    await sql`update account set password = ${cheap} where "userId" = ${user.userId} and "providerId" = 'credential'`.execute(t.db);
    const res = await t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password: user.password } });
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 401, code: 'INVALID_EMAIL_OR_PASSWORD' });
  });
});
