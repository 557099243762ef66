import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { authorizeUrl, createOAuthClient, followAuthorize, pkcePair, type TestOAuthClient } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * Where the browser is sent during authorization: to the front end's /sign-in and /consent when FRONTEND_URL
 * is set (and the built-in pages are not served), to the service's own built-in pages when it is not.
 */

describe('with FRONTEND_URL', () => {
  const frontend = 'https://market.example';
  let t: TestApp;
  let agent: TestOAuthClient;
  let user: TestUser;

  beforeAll(async () => {
    t = await startTestApp({ env: { FRONTEND_URL: frontend } });
    agent = await createOAuthClient(t);
    user = await signUp(t);
  });
  afterAll(async () => {
    await t?.close();
  });

  test('signed out: authorize sends the browser to {FRONTEND_URL}/sign-in with the request', async () => {
    const { challenge } = pkcePair();
    const landing = await followAuthorize(t, authorizeUrl(agent, { challenge, state: 'abc' }));
    expect(landing.origin + landing.pathname).toBe(`${frontend}/sign-in`);
    expect(landing.searchParams.get('client_id')).toBe(agent.clientId);
    expect(landing.searchParams.get('state')).toBe('abc');
  });

  test('signed in, first time: {FRONTEND_URL}/consent?consent_code=..., and a form post from the front end completes it', async () => {
    const { challenge } = pkcePair();
    const landing = await followAuthorize(t, authorizeUrl(agent, { challenge, state: 'xyz' }), user.cookie);
    expect(landing.origin + landing.pathname).toBe(`${frontend}/consent`);
    const consentCode = landing.searchParams.get('consent_code');
    expect(consentCode).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(landing.searchParams.get('client_id')).toBe(agent.clientId);
    expect(landing.searchParams.get('sig')).toBeNull();

    const res = await t.http.post('/api/auth/oauth2/consent', {
      cookie: user.cookie,
      headers: { origin: frontend },
      json: { accept: true, consent_code: consentCode },
    });
    expect(res.status).toBe(200);
    const back = new URL(res.body.url);
    expect(back.origin + back.pathname).toBe(agent.redirectUri);
    expect(back.searchParams.get('code')).toBeTruthy();
    expect(back.searchParams.get('state')).toBe('xyz');
  });

  test('the built-in pages are not served', async () => {
    for (const path of ['/sign-in', '/sign-up', '/consent']) {
      const res = await t.http.get(path);
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('NOT_FOUND');
    }
  });
});

describe('without FRONTEND_URL', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => {
    await t?.close();
  });

  test('the built-in pages are served with a strict CSP and no framing', async () => {
    for (const path of ['/sign-in', '/sign-up']) {
      const res = await t.http.get(path);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toContain('text/html');
      expect(res.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
      expect(res.headers.get('x-frame-options')).toBe('DENY');
    }
  });

  test('the consent page refuses a malformed consent_code, and escapes what it shows', async () => {
    expect((await t.http.get('/consent')).status).toBe(400);
    expect((await t.http.get('/consent?consent_code=%3Cscript%3E')).status).toBe(400);
    const agent = await createOAuthClient(t, { name: '<img src=x onerror=alert(1)>' });
    const user = await signUp(t);
    const { challenge } = pkcePair();
    const landing = await followAuthorize(t, authorizeUrl(agent, { challenge }), user.cookie);
    const page = await t.http.get(`${landing.pathname}${landing.search}`);
    expect(page.status).toBe(200);
    expect(page.text).toContain('&lt;img src=x onerror=alert(1)&gt;');
    expect(page.text).not.toContain('<img src=x');
    // The page names the agent as it is called now, not as it was when its client was created.
    await sql`update public.agents set name = 'Renamed Agent' where id = ${agent.agentId}`.execute(t.db);
    expect((await t.http.get(`${landing.pathname}${landing.search}`)).text).toContain('Renamed Agent');
  });

  test('the sign-in page only ever continues to our own authorize endpoint', async () => {
    const res = await t.http.get('/sign-in?client_id=abc&response_type=code&redirect_uri=https%3A%2F%2Fevil.example%2F&sig=x&exp=1');
    expect(res.text).toMatch(/data-continue="\/api\/auth\/oauth2\/authorize\?client_id=abc&amp;response_type=code&amp;redirect_uri=https%3A%2F%2Fevil.example%2F"/);
    const plain = await t.http.get('/sign-in?next=https://evil.example');
    expect(plain.text).toContain('data-continue=""');
  });
});
