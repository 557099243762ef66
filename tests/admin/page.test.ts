import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * GET /admin over plain HTTP (the charts themselves are checked in Chromium, tests/browser/admin-page.pg-only.test.ts):
 * who gets the page, what others get, and that the page loads nothing from elsewhere.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

const html = { accept: 'text/html,application/xhtml+xml' };

describe('GET /admin', () => {
  it('serves a platform admin the page, self-contained under a nonce-only CSP', async () => {
    const res = await t.http.get('/admin', { cookie: admin.cookie, headers: html });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    const csp = res.headers.get('content-security-policy') ?? '';
    const nonce = /script-src 'nonce-([^']+)'/.exec(csp)?.[1];
    expect(nonce).toBeTruthy();
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("connect-src 'self'");
    expect(res.text).toContain(`<script nonce="${nonce}">`);
    expect(res.text).toContain('/admin/analytics');
    expect(res.text).not.toMatch(/(src|href)="https?:/);
    expect(res.headers.get('x-request-id')).toBeTruthy();
  });

  it('answers signed-out browsers 401 with a sign-in link, and JSON clients the 401 envelope', async () => {
    const page = await t.http.get('/admin', { headers: html });
    expect(page.status).toBe(401);
    expect(page.text).toContain(`href="${t.baseUrl}/sign-in"`);
    expect(page.text).not.toContain('/admin/analytics');
    const api = await t.http.get('/admin', { headers: { accept: 'application/json' } });
    expect(api.status).toBe(401);
    expect(api.body.error).toMatchObject({ code: 'UNAUTHORIZED', details: { signInUrl: `${t.baseUrl}/sign-in` } });
  });

  it('treats an invalid session cookie as signed out', async () => {
    const res = await t.http.get('/admin', { cookie: 'better-auth.session_token=forged.value', headers: html });
    expect(res.status).toBe(401);
  });

  it('answers a signed-in non-admin 403, as a page or as the envelope', async () => {
    const user = await signUp(t);
    const page = await t.http.get('/admin', { cookie: user.cookie, headers: html });
    expect(page.status).toBe(403);
    expect(page.text).not.toContain('/admin/analytics');
    const api = await t.http.get('/admin', { cookie: user.cookie });
    expect(api.status).toBe(403);
    expect(api.body.error.code).toBe('FORBIDDEN');
  });
});
