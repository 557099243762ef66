import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { authorizeUrl, clientOfAgent, followAuthorize, pkcePair, postForm } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { meteredAgent, subscribe, type MeteredAgent } from '../metering/support.ts';

/**
 * What an agent learns about a user stays within what the user consented to (found by a hostile review).
 * The consent page lists `openid` as "Know who you are (your account id)", `email` as "See your email address" and
 * `profile` as "See your name and picture" (functions/auth/oauth/pages.ts), and the user may accept only part of what
 * the agent asked for (`scope` on POST /api/auth/oauth2/consent, docs/oauth.md). The userinfo endpoint honours that:
 * a token without `email` gets no email claim. GET /me with the same token does not: it answers the user's email and
 * name whatever the token's scopes, so the user's "no" to `email` and `profile` changes nothing for the agent.
 */

let t: TestApp;
let user: TestUser;
let x: MeteredAgent;

beforeAll(async () => {
  t = await startTestApp({ now: '2026-03-10T12:00:00.000Z' });
  user = await signUp(t, { name: 'Ada Private' });
  x = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
  await subscribe(t, user.userId, x.tierId);
});
afterAll(() => t.close());

/** The code flow where the agent asks for everything and the user accepts only `granted`. */
async function tokenWithConsentOf(granted: string): Promise<{ accessToken: string; scope: string }> {
  const client = await clientOfAgent(t, x.agentId);
  const { verifier, challenge } = pkcePair();
  const landing = await followAuthorize(t, authorizeUrl(client, { challenge, scope: 'openid profile email offline_access' }), user.cookie);
  expect(landing.pathname).toBe('/consent');
  const consent = await t.http.post('/api/auth/oauth2/consent', {
    cookie: user.cookie,
    headers: { origin: t.baseUrl },
    json: { accept: true, consent_code: landing.searchParams.get('consent_code'), scope: granted },
  });
  expect(consent.status).toBe(200);
  const code = new URL(consent.body.url).searchParams.get('code')!;
  const res = await postForm(t, '/api/auth/oauth2/token', client, {
    grant_type: 'authorization_code',
    code,
    redirect_uri: client.redirectUri,
    code_verifier: verifier,
  });
  expect(res.status).toBe(200);
  return { accessToken: res.body.access_token, scope: res.body.scope };
}

describe('attack: an agent reads what the user declined to share', () => {
  it('a user who accepted only `openid offline_access` keeps their email and name from the agent: GET /me as userinfo does', async () => {
    const { accessToken, scope } = await tokenWithConsentOf('openid offline_access');
    expect(scope.split(' ').sort()).toEqual(['offline_access', 'openid']);

    // The OAuth server itself keeps the declined claims back...
    const userinfo = await t.http.get('/api/auth/oauth2/userinfo', { bearer: accessToken });
    expect(userinfo.status).toBe(200);
    expect(userinfo.body).not.toHaveProperty('email');
    expect(userinfo.body).not.toHaveProperty('name');

    // ...and so must the API: the same token reads the user's id, never the email or name the user declined.
    const me = await t.http.get('/me', { bearer: accessToken });
    expect(me.status).toBe(200);
    expect(me.body.data.id).toBe(user.userId);
    expect(JSON.stringify(me.body)).not.toContain(user.email);
    expect(JSON.stringify(me.body)).not.toContain('Ada Private');
  });

  it("attack: the /admin page's 403 does not tell a token without `email` the address (review 40); with it, it may", async () => {
    for (const [granted, shows] of [['openid offline_access', false], ['openid email', true]] as const) {
      const { accessToken } = await tokenWithConsentOf(granted);
      const page = await t.http.get('/admin', { bearer: accessToken, headers: { accept: 'text/html' } });
      expect([granted, page.status, page.text.includes(user.email)]).toEqual([granted, 403, shows]);
    }
  });

  it('accepting `email` but not `profile` shows the email and still not the name', async () => {
    const { accessToken } = await tokenWithConsentOf('openid email');
    const me = await t.http.get('/me', { bearer: accessToken });
    expect(me.status).toBe(200);
    expect(me.body.data).toMatchObject({ id: user.userId, email: user.email });
    expect(JSON.stringify(me.body)).not.toContain('Ada Private');
  });

  it('with every scope accepted GET /me answers id, email and name (contract.md, Trust boundaries)', async () => {
    const { accessToken } = await tokenWithConsentOf('openid profile email offline_access');
    const me = await t.http.get('/me', { bearer: accessToken });
    expect(me.body.data).toEqual({ id: user.userId, email: user.email, name: 'Ada Private' });
  });
});
