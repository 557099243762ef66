import { randomUUID } from 'node:crypto';
import { sql } from '../../functions/platform/db.ts';
import type { TestApp } from './app.ts';

/**
 * Users for tests, made through the real HTTP endpoints (POST /api/auth/sign-up/email, /sign-in/email), so a
 * test holds the same session cookie a browser would. `cookie` is ready for `t.http.get(path, { cookie })`.
 */

export interface TestUser {
  userId: string;
  email: string;
  password: string;
  name: string;
  /** `name=value` of the session cookie. */
  cookie: string;
}

export interface SignUpOptions {
  email?: string;
  password?: string;
  name?: string;
  /** Mark the email verified (in SQL, as if the mailed link had been followed); default false. */
  verified?: boolean;
}

/**
 * Signs a new user up (unique email unless given), then signs in and returns the session cookie: sign-up itself
 * does not sign in (contract.md, Trust boundaries: it answers the same for a new and an existing email).
 * `verified: true` marks the email verified directly, for tests that need a verified owner.
 */
export async function signUp(t: TestApp, options: SignUpOptions = {}): Promise<TestUser> {
  const email = (options.email ?? `user-${randomUUID().slice(0, 12)}@example.test`).toLowerCase();
  const password = options.password ?? `pw-${randomUUID()}`;
  const name = options.name ?? 'Test User';
  const res = await t.http.post('/api/auth/sign-up/email', { json: { email, password, name } });
  if (res.status !== 200) throw new Error(`sign-up failed: ${res.status} ${res.text}`);
  if (options.verified) await verifyEmail(t, email);
  const user = await signIn(t, { email, password });
  if (user.userId !== res.body.user.id) throw new Error(`sign-up of ${email}: the address already had an account`);
  return { ...user, name };
}

/** Marks an address verified, as following the verification link would. */
export async function verifyEmail(t: TestApp, email: string): Promise<void> {
  await sql`update "user" set "emailVerified" = true where email = ${email.toLowerCase()}`.execute(t.db);
}

/** Signs an existing user in; a new session each time. */
export async function signIn(t: TestApp, credentials: { email: string; password: string }): Promise<TestUser> {
  const res = await t.http.post('/api/auth/sign-in/email', { json: credentials });
  if (res.status !== 200) throw new Error(`sign-in failed: ${res.status} ${res.text}`);
  return {
    userId: res.body.user.id,
    email: credentials.email.toLowerCase(),
    password: credentials.password,
    name: res.body.user.name,
    cookie: sessionCookie(res.headers),
  };
}

/** A signed-in user with the platform_admin role and a verified email (signed up over HTTP, promoted in SQL). */
export async function createAdmin(t: TestApp, options: SignUpOptions = {}): Promise<TestUser> {
  const user = await signUp(t, { name: 'Test Admin', verified: true, ...options });
  await sql`update "user" set role = 'platform_admin' where id = ${user.userId}`.execute(t.db);
  return user;
}

/** The `name=value` pairs of every cookie a response set (to send back as a Cookie header). */
export function sessionCookie(headers: Headers): string {
  const pairs = headers
    .getSetCookie()
    .map((c) => c.split(';')[0]!)
    .filter((pair) => !pair.endsWith('='));
  if (!pairs.some((p) => /session_token=/.test(p))) throw new Error('the response set no session cookie');
  return pairs.join('; ');
}
