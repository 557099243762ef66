import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';

/**
 * Session cookie attributes by environment (contract.md: HttpOnly always; SameSite=Lax in development and
 * Secure only when PUBLIC_BASE_URL is https; SameSite=None; Secure in production). One database, the app
 * started three times with different configuration.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

async function sessionSetCookie(t: TestApp): Promise<string> {
  const email = `c-${Math.random().toString(36).slice(2)}@example.test`;
  const up = await t.http.post('/api/auth/sign-up/email', { json: { email, password: 'cookie password', name: 'C' } });
  expect(up.status, up.text).toBe(200);
  // Sign-up does not sign in (contract.md, Trust boundaries): the cookie comes from signing in.
  const res = await t.http.post('/api/auth/sign-in/email', { json: { email, password: 'cookie password' } });
  expect(res.status, res.text).toBe(200);
  const cookie = res.headers.getSetCookie().find((c) => /session_token=/.test(c));
  expect(cookie).toBeDefined();
  return cookie!;
}

describe('session cookie', () => {
  it('production: __Secure- prefix, HttpOnly, Secure, SameSite=None', async () => {
    const t = await startTestApp({
      testDatabase: db,
      env: { NODE_ENV: 'production', PUBLIC_BASE_URL: 'https://api.market.example', FRONTEND_URL: 'https://market.example' },
    });
    try {
      const cookie = await sessionSetCookie(t);
      expect(cookie).toMatch(/^__Secure-better-auth\.session_token=/);
      expect(cookie).toMatch(/; HttpOnly/i);
      expect(cookie).toMatch(/; Secure/i);
      expect(cookie).toMatch(/; SameSite=None/i);
    } finally {
      await t.close();
    }
  });

  it('development over https: HttpOnly, Secure, SameSite=Lax', async () => {
    const t = await startTestApp({ testDatabase: db, env: { NODE_ENV: 'development', PUBLIC_BASE_URL: 'https://dev.market.example' } });
    try {
      const cookie = await sessionSetCookie(t);
      expect(cookie).toMatch(/; HttpOnly/i);
      expect(cookie).toMatch(/; Secure/i);
      expect(cookie).toMatch(/; SameSite=Lax/i);
    } finally {
      await t.close();
    }
  });

  it('development over http: HttpOnly, SameSite=Lax, not Secure', async () => {
    const t = await startTestApp({ testDatabase: db, env: { NODE_ENV: 'development' } });
    try {
      const cookie = await sessionSetCookie(t);
      expect(cookie).toMatch(/^better-auth\.session_token=/);
      expect(cookie).toMatch(/; HttpOnly/i);
      expect(cookie).toMatch(/; SameSite=Lax/i);
      expect(cookie).not.toMatch(/; Secure/i);
    } finally {
      await t.close();
    }
  });
});
