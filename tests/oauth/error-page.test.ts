import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { authorizeUrl, createOAuthClient, followAuthorize, pkcePair, type TestOAuthClient } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * The authorization server's error page, where a browser lands when the flow cannot go back to the application
 * (docs/oauth.md). The auth library's own page at this path answered, under NODE_ENV=production, with a redirect to
 * `/` on the API's origin (a JSON 404), and elsewhere could be framed; ours answers in every environment.
 */

const expectOurPage = (res: { status: number; headers: Headers }) => {
  expect(res.status).toBe(400);
  expect(res.headers.get('content-type')).toMatch(/^text\/html/);
  const csp = res.headers.get('content-security-policy') ?? '';
  expect(csp).toContain("frame-ancestors 'none'");
  expect(csp).toContain("script-src 'none'");
  expect(res.headers.get('x-frame-options')).toBe('DENY');
  expect(res.headers.get('cache-control')).toBe('no-store');
};

describe('without FRONTEND_URL', () => {
  let t: TestApp;
  let agent: TestOAuthClient;
  let user: TestUser;
  beforeAll(async () => {
    t = await startTestApp();
    agent = await createOAuthClient(t, { redirectUris: ['https://agent.example/cb'] });
    user = await signUp(t);
  });
  afterAll(() => t?.close());

  test('an unregistered redirect_uri lands on a page that says why, refuses framing and runs nothing', async () => {
    const { challenge } = pkcePair();
    const landing = await followAuthorize(t, authorizeUrl(agent, { challenge, redirectUri: 'https://evil.example/cb' }), user.cookie);
    expect(landing.origin + landing.pathname).toBe(`${t.baseUrl}/api/auth/error`);
    const res = await t.http.get(landing.pathname + landing.search);
    expectOurPage(res);
    expect(res.text).toContain('has not registered with the marketplace');
    expect(res.text).toContain('invalid_redirect: redirect_uri is not registered for this client (exact match required)');
  });

  test('an unknown client lands on the same page, told that the client_id is not registered', async () => {
    const { challenge } = pkcePair();
    const landing = await followAuthorize(t, authorizeUrl({ ...agent, clientId: 'no-such-client' }, { challenge }), user.cookie);
    expect(landing.origin + landing.pathname).toBe(`${t.baseUrl}/api/auth/error`);
    const res = await t.http.get(landing.pathname + landing.search);
    expectOurPage(res);
    expect(res.text).toContain('not known to the marketplace');
    expect(res.text).toContain('invalid_client: client_id is not registered with the marketplace');
  });

  test('attack: a made-up link puts markup in the code and the description: shown as text, the code as "unknown"', async () => {
    const query = new URLSearchParams({
      error: '<img src=x onerror=alert(1)>',
      error_description: `<script>alert(1)</script><a href="https://evil.example">Call support</a>\u0007${'x'.repeat(1000)}`,
    });
    const res = await t.http.get(`/api/auth/error?${query}`);
    expectOurPage(res);
    expect(res.text).not.toContain('<script>alert');
    expect(res.text).not.toContain('<img');
    expect(res.text).not.toContain('<a href="https://evil.example"');
    expect(res.text).toContain('unknown: &lt;script&gt;alert(1)&lt;/script&gt;&lt;a href=&quot;https://evil.example&quot;&gt;Call support&lt;/a&gt;');
    expect(res.text).not.toContain('x'.repeat(301));
    expect(res.text).toContain('Sign-in could not continue.');
  });

  test('attack: a made-up link cannot turn text around or hide it (bidirectional overrides, zero-width characters)', async () => {
    // Found by a review: U+202E shows "\u202Enigol/elpmaxe.live//:sptth" as https://evil.example/login reversed.
    const query = new URLSearchParams({
      error: 'invalid_client',
      error_description: 'Sign in again at \u202Enigol/elpmaxe.live//:sptth\u202C now\u200B\u2066 \u0430pple',
    });
    const res = await t.http.get(`/api/auth/error?${query}`);
    expectOurPage(res);
    expect(res.text).not.toMatch(/[\u202A-\u202E\u2066-\u2069\u200B-\u200F\u0430]/);
    expect(res.text).toContain('invalid_client: Sign in again at nigol/elpmaxe.live//:sptth now pple');
  });
});

describe('with FRONTEND_URL', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ env: { FRONTEND_URL: 'https://market.example' } });
  });
  afterAll(() => t?.close());

  test('the page is still served: it is the authorization server\'s, not one a front end replaces', async () => {
    const res = await t.http.get('/api/auth/error?error=invalid_client&error_description=client_id%20is%20required');
    expectOurPage(res);
    expect(res.text).toContain('invalid_client: client_id is required');
  });
});
