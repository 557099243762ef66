import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, authorizeUrl, createOAuthClient, followAuthorize, pkcePair, postForm, type TestOAuthClient } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * The code allowance (60 codes an hour per client and user, rule 24; code-allowance.test.ts) against the ways around it
 * and the ways to turn it against a user that a review found after it was built:
 *   - the library's hooks issue a code after ANY request whose body carries the signed query (`oauth_query`) and whose
 *     answer sets the session cookie: update-user and organization/set-active did, outside the allowance;
 *   - a page on another site made the user's browser send authorize with the session cookie (production cookies are
 *     SameSite=None): 60 images spent a victim's allowance for an agent they use and locked them out for an hour;
 *   - every refresh token a code gives passes the token endpoint, so the exchanges are counted there too.
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

/** A user who has consented to `client` (code 1 of the hour) and then authorized until the hour's 60 are used up. */
async function userWithoutCodesLeft(client: TestOAuthClient): Promise<TestUser> {
  const user = await signUp(t);
  await accessTokenFor(t, user, { client });
  for (let i = 0; i < 59; i++) expect((await followAuthorize(t, authorizeUrl(client, { challenge: pkcePair().challenge }), user.cookie)).searchParams.has('code')).toBe(true);
  const refused = await followAuthorize(t, authorizeUrl(client, { challenge: pkcePair().challenge }), user.cookie);
  expect(refused.searchParams.get('error')).toBe('temporarily_unavailable');
  return user;
}

/** The signed query the library puts on the sign-in page of a signed-out authorization (free to get, reusable). */
async function signedQuery(client: TestOAuthClient): Promise<string> {
  const signIn = await followAuthorize(t, authorizeUrl(client, { challenge: pkcePair().challenge }));
  expect(signIn.pathname).toBe('/sign-in');
  return signIn.search.slice(1);
}

const codeIn = (body: { url?: unknown } | undefined) => (typeof body?.url === 'string' ? new URL(body.url).searchParams.get('code') : null);

describe('attack: codes through another endpoint that sets the session cookie', () => {
  test('update-user carrying the signed query issues no code once the allowance is used up (429), and spends it while it lasts', async () => {
    const client = await createOAuthClient(t, { name: 'Seller agent' });
    const fresh = await signUp(t);
    await accessTokenFor(t, fresh, { client }); // code 1
    const oauthQuery = await signedQuery(client);
    const update = (user: TestUser, name: string) =>
      t.http.post('/api/auth/update-user', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { name, oauth_query: oauthQuery } });
    // While the allowance lasts it issues codes, each one counted: code 2, then 58 by authorize, then none
    const issued = await update(fresh, 'Seller 1');
    expect(codeIn(issued.body), issued.text).not.toBeNull();
    for (let i = 0; i < 58; i++) await followAuthorize(t, authorizeUrl(client, { challenge: pkcePair().challenge }), fresh.cookie);
    const refused = await update(fresh, 'Seller 2');
    expect([refused.status, refused.body.error?.code]).toEqual([429, 'RATE_LIMITED']);

    const exhausted = await userWithoutCodesLeft(client);
    for (let i = 0; i < 3; i++) expect(codeIn((await update(exhausted, `Seller ${i}`)).body)).toBeNull();
  });

  test('organization/set-active carrying the signed query issues no code once the allowance is used up', async () => {
    const client = await createOAuthClient(t, { name: 'Seller agent' });
    const seller = await userWithoutCodesLeft(client);
    const org = await t.http.post('/api/auth/organization/create', {
      cookie: seller.cookie,
      headers: { origin: t.baseUrl },
      json: { name: 'Seller org', slug: `seller-${Date.now()}` },
    });
    expect(org.status, org.text).toBe(200);
    const res = await t.http.post('/api/auth/organization/set-active', {
      cookie: seller.cookie,
      headers: { origin: t.baseUrl },
      json: { organizationId: org.body.id, oauth_query: await signedQuery(client) },
    });
    expect(codeIn(res.body), `${res.status} ${res.text}`).toBeNull();
  });
});

/** A GET with the headers a browser sends for a request of another site's page (raw: Node's fetch adds its own). */
function crossSite(path: string, cookie: string, kind: 'image' | 'navigation'): Promise<{ status: number; location?: string }> {
  const metadata =
    kind === 'image'
      ? { accept: 'image/avif,image/webp,*/*;q=0.8', 'sec-fetch-mode': 'no-cors', 'sec-fetch-dest': 'image' }
      : { accept: 'text/html', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document', 'sec-fetch-user': '?1' };
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      new URL(path, t.baseUrl),
      { method: 'GET', headers: { cookie, referer: 'https://elsewhere.example/', 'sec-fetch-site': 'cross-site', ...metadata } },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, location: res.headers.location }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

describe("attack: a stranger's page spends a victim's code allowance", () => {
  test('60 cross-site image requests to authorize issue nothing and leave the victim able to sign in to the agent', async () => {
    const agent = await createOAuthClient(t, { name: 'An agent the victim uses' });
    const victim = await signUp(t);
    await accessTokenFor(t, victim, { client: agent });
    for (let i = 0; i < 60; i++) {
      const res = await crossSite(authorizeUrl(agent, { challenge: pkcePair().challenge }), victim.cookie, 'image');
      // taken as signed out: sent to the sign-in page, no code
      expect(new URL(res.location!, t.baseUrl).searchParams.has('code')).toBe(false);
    }
    const landing = await followAuthorize(t, authorizeUrl(agent, { challenge: pkcePair().challenge, state: 'mine' }), victim.cookie);
    expect(landing.searchParams.get('error'), landing.toString()).toBeNull();
    expect(landing.searchParams.has('code')).toBe(true);
  });

  test('a top-level navigation from the agent\'s site, the real authorization, still issues the code', async () => {
    const agent = await createOAuthClient(t);
    const user = await signUp(t);
    await accessTokenFor(t, user, { client: agent });
    const res = await crossSite(authorizeUrl(agent, { challenge: pkcePair().challenge }), user.cookie, 'navigation');
    expect(res.status).toBe(302);
    expect(new URL(res.location!).searchParams.has('code')).toBe(true);
  });
});

describe('the token endpoint counts the exchanges, whatever issued the codes', () => {
  test('at most 60 codes of one client are exchanged for one user in an hour (429 invalid_request); a refused exchange spends nothing', async () => {
    const client = await createOAuthClient(t);
    const user = await signUp(t);
    const minute = 60_000;
    const issued: Array<{ code: string; verifier: string }> = [];
    const authorize = async () => {
      const { verifier, challenge } = pkcePair();
      const landing = await followAuthorize(t, authorizeUrl(client, { challenge }), user.cookie);
      expect(landing.searchParams.has('code'), landing.toString()).toBe(true);
      issued.push({ code: landing.searchParams.get('code')!, verifier });
    };
    const exchange = ({ code, verifier }: { code: string; verifier: string }) =>
      postForm(t, '/api/auth/oauth2/token', client, { grant_type: 'authorization_code', code, redirect_uri: client.redirectUri, code_verifier: verifier });

    await accessTokenFor(t, user, { client }); // the consent, at minute 0
    t.clock.advance(61 * minute);
    await authorize(); // minute 61: the issuing hour opens (61-121)
    t.clock.advance(9 * minute);
    expect((await exchange(issued.shift()!)).status).toBe(200); // minute 70: the exchange hour opens (70-130)
    t.clock.advance(50 * minute);
    for (let i = 0; i < 59; i++) await authorize(); // minute 120: issuing 60 of 60
    const refusedByLibrary = await exchange({ code: issued[0]!.code, verifier: 'not-the-verifier-of-this-code-0123456789abcdefgh' });
    expect([400, 401]).toContain(refusedByLibrary.status); // refused by the library: spends nothing
    issued.shift();
    for (const c of issued.splice(0)) expect((await exchange(c)).status).toBe(200); // exchanges 2..59 of the hour
    t.clock.advance(2 * minute);
    await authorize(); // minute 122: a new issuing hour; the exchange hour still has one left
    await authorize();
    expect((await exchange(issued.shift()!)).status).toBe(200); // the 60th
    const refused = await exchange(issued.shift()!);
    expect([refused.status, refused.body.error]).toEqual([429, 'invalid_request']);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
  });
});

describe('a crafted signed query is a 4xx, never a 500', () => {
  // Its client id is read before the library checks the signature: `client_id=%00` decodes to a NUL, which PostgreSQL
  // refuses in text, and every auth POST carrying such an oauth_query answered 500 (found by a review).
  const nulQuery = 'client_id=%00&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcallback';
  const nulConsentCode = Buffer.from(`sig=x&${nulQuery}&scope=openid`).toString('base64url');
  test.each(['/api/auth/update-user', '/api/auth/sign-up/email', '/api/auth/request-password-reset', '/api/auth/sign-in/email', '/api/auth/oauth2/continue'])(
    '%s, signed out, with an oauth_query whose client_id is a percent-encoded NUL',
    async (path) => {
      const res = await t.http.post(path, {
        headers: { origin: t.baseUrl },
        json: { name: 'x', email: `nobody-${Date.now()}@example.com`, password: 'wrong-password-123', oauth_query: nulQuery },
      });
      expect(res.status, res.text).toBeGreaterThanOrEqual(400);
      expect(res.status, res.text).toBeLessThan(500);
    },
  );
  test('the consent post and the built-in consent page, with a consent code whose client_id is a percent-encoded NUL', async () => {
    const posted = await t.http.post('/api/auth/oauth2/consent', { headers: { origin: t.baseUrl }, json: { accept: true, consent_code: nulConsentCode } });
    expect(posted.status, posted.text).toBeGreaterThanOrEqual(400);
    expect(posted.status, posted.text).toBeLessThan(500);
    const page = await t.http.get(`/consent?consent_code=${nulConsentCode}`);
    expect(page.status).toBe(400);
  });
});
