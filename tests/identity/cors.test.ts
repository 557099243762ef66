import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertAgent } from '../support/fixtures.ts';
import { browserGet } from '../support/http.ts';
import { createAdmin, signUp } from '../support/users.ts';

/**
 * FRONTEND_URL is trusted for CORS (with credentials) and for cookie-authenticated writes; other origins are not.
 * Reads with the cookie are the user's only when fetch metadata say so (security rule 29).
 */
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

  describe("reads with the cookie that another site's page makes the browser send (review 24)", () => {
    // Production cookies are SameSite=None, so any page the user opens can make their browser send them: reads acted as
    // the user (an <img> of /me/checkout/... spent the day's checkout reads, each a Stripe read) until they had to be
    // the user's own doing, as admin reads already had to (rule 29).
    const fromElsewhere = { 'sec-fetch-site': 'cross-site', referer: 'https://evil.example/page' };
    const notTheUsers: Array<Record<string, string>> = [
      { ...fromElsewhere, 'sec-fetch-mode': 'no-cors', 'sec-fetch-dest': 'image' },
      { ...fromElsewhere, 'sec-fetch-mode': 'no-cors', 'sec-fetch-dest': 'script' },
      { ...fromElsewhere, 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'iframe' },
      { ...fromElsewhere, 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty', origin: 'https://evil.example' },
      { ...fromElsewhere, 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document', 'sec-purpose': 'prefetch' },
      // a popup another site opened and navigates again and again, without a click: the API is not navigated to
      { ...fromElsewhere, 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' },
    ];
    const theUsers: Array<Record<string, string>> = [
      { 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty' },
      { 'sec-fetch-site': 'same-site', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty' },
      { 'sec-fetch-site': 'none', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' },
      { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty', origin: FRONTEND },
      {}, // no fetch metadata: not a browser, no cookie of the user's to ride on
    ];

    it("attack: another site's image, script, frame, fetch, prefetch or navigation does not act as the user on a route that needs one", async () => {
      const user = await signUp(t);
      for (const path of ['/me', '/me/subscriptions']) {
        for (const headers of notTheUsers) {
          const res = await browserGet(t.baseUrl, path, { cookie: user.cookie, ...headers });
          const error = JSON.parse(res.text).error;
          expect([path, headers, res.status, error?.code, error?.details?.reason]).toEqual([path, headers, 403, 'FORBIDDEN', 'cross_site']);
        }
        for (const headers of theUsers) {
          const res = await browserGet(t.baseUrl, path, { cookie: user.cookie, ...headers });
          expect([path, headers, res.status]).toEqual([path, headers, 200]);
        }
      }
      const me = await browserGet(t.baseUrl, '/me', { cookie: user.cookie, ...theUsers[3]! });
      expect(JSON.parse(me.text).data.id).toBe(user.userId);
    });

    it("a public route serves another site's read as anyone's: an admin's cookie shows it no unpublished agent", async () => {
      const admin = await createAdmin(t);
      const draft = await insertAgent(t.db, { status: 'draft' });
      for (const path of [`/agents/${draft.id}`, `/agents/${draft.id}/metric-definitions`]) {
        const own = await browserGet(t.baseUrl, path, { cookie: admin.cookie, ...theUsers[0]! });
        expect([path, own.status]).toEqual([path, 200]);
        for (const headers of notTheUsers) {
          const res = await browserGet(t.baseUrl, path, { cookie: admin.cookie, ...headers });
          expect([path, headers, res.status, JSON.parse(res.text).error?.code]).toEqual([path, headers, 404, 'NOT_FOUND']);
        }
      }
    });
  });
});
