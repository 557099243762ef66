import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp } from '../support/users.ts';

/** FRONTEND_URL is trusted for CORS (with credentials) and for cookie-authenticated writes; other origins are not. */
const FRONTEND = 'https://market.example';
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { FRONTEND_URL: FRONTEND } });
});
afterAll(() => t.close());

describe('CORS and trusted origins', () => {
  it('answers a preflight from the front end with credentials allowed', async () => {
    const res = await t.http.call('OPTIONS', '/me', {
      headers: { origin: FRONTEND, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' },
    });
    expect(res.status).toBe(204);
    expect(res.headers.get('access-control-allow-origin')).toBe(FRONTEND);
    expect(res.headers.get('access-control-allow-credentials')).toBe('true');
    expect(res.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('authorization');
  });

  it('gives another origin no CORS headers', async () => {
    const res = await t.http.get('/health', { headers: { origin: 'https://evil.example' } });
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
    const ok = await t.http.get('/health', { headers: { origin: FRONTEND } });
    expect(ok.headers.get('access-control-allow-origin')).toBe(FRONTEND);
    expect(ok.headers.get('access-control-expose-headers')?.toLowerCase()).toContain('x-request-id');
    expect(ok.headers.get('access-control-allow-credentials')).toBe('true');
    expect(ok.headers.get('vary')).toContain('Origin');
    expect(ok.headers.get('x-request-id')).toBeTruthy();
  });

  it('puts the CORS headers on errors too, so the front end can read them', async () => {
    const res = await t.http.get('/me', { headers: { origin: FRONTEND } });
    expect(res.status).toBe(401);
    expect(res.headers.get('access-control-allow-origin')).toBe(FRONTEND);
    expect(res.headers.get('access-control-expose-headers')).toContain('X-Request-Id');
  });

  it('the front end signs in and writes with its cookie; the same write from another origin is refused', async () => {
    const admin = await createAdmin(t);
    const user = await signUp(t);
    const signIn = await t.http.post('/api/auth/sign-in/email', {
      json: { email: admin.email, password: admin.password },
      headers: { origin: FRONTEND },
    });
    expect(signIn.status).toBe(200);
    expect(signIn.headers.get('access-control-allow-origin')).toBe(FRONTEND);
    const fromFrontend = await t.http.put(`/admin/users/${user.userId}/role`, {
      cookie: admin.cookie,
      json: { role: 'platform_admin' },
      headers: { origin: FRONTEND },
    });
    expect(fromFrontend.status).toBe(200);
    const fromElsewhere = await t.http.put(`/admin/users/${user.userId}/role`, {
      cookie: admin.cookie,
      json: { role: 'user' },
      headers: { origin: 'https://evil.example' },
    });
    expect(fromElsewhere.status).toBe(403);
    expect(fromElsewhere.body.error.code).toBe('FORBIDDEN');
    expect((await t.http.get('/me', { cookie: user.cookie })).body.data.role).toBe('platform_admin');
  });
});
