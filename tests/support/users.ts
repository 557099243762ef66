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
}

/** Signs a new user up (unique email unless given) and returns its session cookie. */
export async function signUp(t: TestApp, options: SignUpOptions = {}): Promise<TestUser> {
  const email = options.email ?? `user-${randomUUID().slice(0, 12)}@example.test`;
  const password = options.password ?? `pw-${randomUUID()}`;
  const name = options.name ?? 'Test User';
  const res = await t.http.post('/api/auth/sign-up/email', { json: { email, password, name } });
  if (res.status !== 200) throw new Error(`sign-up failed: ${res.status} ${res.text}`);
  return { userId: res.body.user.id, email: email.toLowerCase(), password, name, cookie: sessionCookie(res.headers) };
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

/** A signed-in user with the platform_admin role (signed up over HTTP, promoted in the database). */
export async function createAdmin(t: TestApp, options: SignUpOptions = {}): Promise<TestUser> {
  const user = await signUp(t, { name: 'Test Admin', ...options });
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
