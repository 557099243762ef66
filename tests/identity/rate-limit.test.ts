import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * AUTH_RATE_LIMIT_PER_MINUTE per client IP and endpoint on sign-in, sign-up and the password-reset steps.
 * The test app normally runs with 0 (off); this file turns it on. The tests talk over loopback, so the client
 * address is taken from X-Forwarded-For (a loopback peer counts as our own proxy), which lets one test play
 * several clients.
 */
let t: TestApp;
let user: TestUser;
beforeAll(async () => {
  t = await startTestApp({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '3' } });
  user = await signUp(t, {});
});
afterAll(() => t.close());

const signInFrom = (ip: string, password = 'wrong password') =>
  t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password }, headers: { 'x-forwarded-for': ip } });

describe('auth rate limits', () => {
  it('the fourth sign-in within a minute from one IP answers 429 RATE_LIMITED with Retry-After; other IPs are unaffected', async () => {
    for (let i = 0; i < 3; i++) expect((await signInFrom('203.0.113.7')).status).toBe(401);
    const limited = await signInFrom('203.0.113.7', user.password);
    expect(limited.status).toBe(429);
    expect(limited.body).toMatchObject({ status: 'error', data: null, error: { code: 'RATE_LIMITED' } });
    const retryAfter = Number(limited.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(limited.headers.getSetCookie()).toEqual([]);

    expect((await signInFrom('203.0.113.8', user.password)).status).toBe(200);
  });

  it('a new window opens after a minute', async () => {
    for (let i = 0; i < 3; i++) await signInFrom('198.51.100.1');
    expect((await signInFrom('198.51.100.1')).status).toBe(429);
    t.clock.advance(61_000);
    expect((await signInFrom('198.51.100.1', user.password)).status).toBe(200);
  });

  it('counts each endpoint separately: sign-up and password reset have their own budgets', async () => {
    const ip = '192.0.2.44';
    for (let i = 0; i < 3; i++) await signInFrom(ip);
    expect((await signInFrom(ip)).status).toBe(429);
    const signUpRes = await t.http.post('/api/auth/sign-up/email', {
      json: { email: 'rl-new@example.test', password: 'rate limit pw', name: 'R' },
      headers: { 'x-forwarded-for': ip },
    });
    expect(signUpRes.status).toBe(200);
    for (let i = 0; i < 3; i++) {
      const r = await t.http.post('/api/auth/request-password-reset', {
        json: { email: user.email, redirectTo: `${t.baseUrl}/reset` },
        headers: { 'x-forwarded-for': ip },
      });
      expect(r.status).toBe(200);
    }
    const fourth = await t.http.post('/api/auth/request-password-reset', {
      json: { email: user.email, redirectTo: `${t.baseUrl}/reset` },
      headers: { 'x-forwarded-for': ip },
    });
    expect(fourth.status).toBe(429);
    expect(fourth.headers.get('retry-after')).toBeTruthy();
    for (let i = 0; i < 3; i++) {
      await t.http.post('/api/auth/reset-password', { json: { newPassword: 'whatever pw', token: 'x' }, headers: { 'x-forwarded-for': ip } });
    }
    const resetLimited = await t.http.post('/api/auth/reset-password', {
      json: { newPassword: 'whatever pw', token: 'x' },
      headers: { 'x-forwarded-for': ip },
    });
    expect(resetLimited.status).toBe(429);
  });

  it('does not limit other endpoints', async () => {
    for (let i = 0; i < 6; i++) expect((await t.http.get('/me', { cookie: user.cookie, headers: { 'x-forwarded-for': '192.0.2.99' } })).status).toBe(200);
  });
});

describe('AUTH_RATE_LIMIT_PER_MINUTE=0', () => {
  it('disables the limit', async () => {
    const open = await startTestApp({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '0' } });
    try {
      const u = await signUp(open);
      for (let i = 0; i < 6; i++) {
        const r = await open.http.post('/api/auth/sign-in/email', { json: { email: u.email, password: 'nope nope' } });
        expect(r.status).toBe(401);
      }
    } finally {
      await open.close();
    }
  });
});
