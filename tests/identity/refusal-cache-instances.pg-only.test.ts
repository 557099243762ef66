import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';
import { testPasswordHashing } from '../support/password-hashing.ts';
import { signUp } from '../support/users.ts';
import { REFUSAL_CACHE_MS } from '../../functions/platform/rate-limits.ts';

/**
 * Review 115. The refusal cache (platform/rate-limits.ts `refusedHere`) remembered a refusal until the key's window
 * ended; a give-back (`refundToken`) forgets it only in the instance that gives back (review 102 fixed it within one
 * app). Production runs several instances over one database. So a refusal that met an in-flight request on instance A,
 * given back on instance B, kept A refusing for the rest of the window while B and the database admitted: the account's
 * owner, with the right password and no failure over the limit, was locked out of every sign-in landing on A for 15
 * minutes (for the daily allowances, a day). A cached refusal now lasts REFUSAL_CACHE_MS, then the database is asked.
 */
const env = { AUTH_RATE_LIMIT_PER_MINUTE: '0', AUTH_FAILED_SIGNINS_PER_ACCOUNT: '3' };
const originalVerify = testPasswordHashing.verify;
let gate: Promise<void> | undefined;
let entered: (() => void) | undefined;

describe('two instances on one database: a sign-in given back on B after A refused', () => {
  let database: TestDatabase;
  let a: TestApp;
  let b: TestApp;
  beforeAll(async () => {
    // The owner's correct password is checked slowly (held at a gate the test opens), as scrypt takes its time.
    testPasswordHashing.verify = async (input) => {
      if (gate) {
        entered?.();
        await gate;
      }
      return originalVerify(input);
    };
    database = await createTestDatabase();
    a = await startTestApp({ testDatabase: database, env });
    b = await startTestApp({ testDatabase: database, env });
  });
  afterAll(async () => {
    testPasswordHashing.verify = originalVerify;
    await a?.close();
    await b?.close();
    await database?.drop();
  });

  it('instance A stops refusing the owner once its cached refusal is a few seconds old and the count has room (B gave back)', async () => {
    const owner = await signUp(a);
    const signIn = (t: TestApp, password: string) => t.http.post('/api/auth/sign-in/email', { json: { email: owner.email, password } });
    // Two wrong guesses: one failure left before the limit of 3.
    expect((await signIn(a, 'wrong guess 1')).status).toBe(401);
    expect((await signIn(b, 'wrong guess 2')).status).toBe(401);

    // The owner signs in on B; while their password is checked (their attempt holds the third slot) a guess on A is refused.
    let open!: () => void;
    gate = new Promise<void>((resolve) => (open = resolve));
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const ownersSignIn = signIn(b, owner.password);
    await inside;
    expect((await signIn(a, 'wrong guess 3')).status).toBe(429);
    gate = undefined;
    open();
    expect((await ownersSignIn).status).toBe(200); // a success: its slot is given back, 2 failures counted

    // The database has room for a sign-in: B admits the owner, and A does too once its refusal is REFUSAL_CACHE_MS old
    // (it refused them for the rest of the 15 minutes).
    expect((await signIn(b, owner.password)).status).toBe(200);
    a.clock.advance(REFUSAL_CACHE_MS);
    const onA = await signIn(a, owner.password);
    expect({ status: onA.status, retryAfter: onA.headers.get('retry-after') }).toEqual({ status: 200, retryAfter: null });
  });
});
