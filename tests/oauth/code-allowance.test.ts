import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import {
  accessTokenFor,
  authorizeUrl,
  createOAuthClient,
  followAuthorize,
  pkcePair,
  postForm,
  type TestOAuthClient,
} from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * Once a user had consented to an agent, every authorization of theirs issued a new code: a `verification` row holding
 * the whole request (up to the 4 KiB rule 24 allows) for 10 minutes, and, exchanged by the agent that owns the client,
 * a refresh-token row for 30 days. Nothing counted them (review 03: 100 codes in 1.3 s from one sequential client; 100
 * authorize+exchange rounds in 3.5 s), so an agent seller with its client's secret and one account of its own minted
 * refresh tokens without limit by authorizing again instead of refreshing, past the 60-an-hour refresh allowance
 * (refresh-allowance.test.ts), faster than the housekeeping prunes. Now one client's codes for one user are at most 60
 * an hour, whichever endpoint issues them (authorize, the consent post, the library's continue endpoint, a sign-in
 * carrying the signed query); the 61st
 * authorization is sent back to the redirect_uri with `error=temporarily_unavailable` and stores nothing, and an
 * authorization that issues no code (the consent or sign-in page, an error) spends nothing.
 */

const ISSUER_PATH = '/api/auth';
let t: TestApp;

beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

/** Codes the library keeps for this user (each a verification row holding the request). */
const storedCodes = async (user: TestUser) =>
  (await first<{ n: number }>(
    t.db,
    sql`select count(*)::int as n from "verification"
         where value like ${'%"authorization_code"%'} and value like ${`%${user.userId}%`}`,
  ))!.n;

const refreshTokensOf = async (user: TestUser, c: TestOAuthClient) =>
  (await first<{ n: number }>(
    t.db,
    sql`select count(*)::int as n from "oauthRefreshToken" where "userId" = ${user.userId} and "clientId" = ${c.clientId}`,
  ))!.n;

/** Authorizes `n` times (already consented) and returns where each landed. */
async function authorizeTimes(user: TestUser, client: TestOAuthClient, n: number, params: { state?: string; scope?: string } = {}): Promise<URL[]> {
  const landings: URL[] = [];
  for (let i = 0; i < n; i++) landings.push(await followAuthorize(t, authorizeUrl(client, { challenge: pkcePair().challenge, ...params }), user.cookie));
  return landings;
}

const codes = (landings: URL[]) => landings.filter((l) => l.searchParams.has('code')).length;

/** A user who has consented to `client` (which issued that one code) and may authorize again. */
async function consentedUser(client: TestOAuthClient): Promise<TestUser> {
  const user = await signUp(t);
  await accessTokenFor(t, user, { client });
  return user;
}

/** A request as a browser navigation sends it (Node's fetch always adds `Sec-Fetch-Mode: cors`). */
function raw(method: string, path: string, headers: Record<string, string>, body = ''): Promise<{ status: number; location?: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(new URL(path, t.baseUrl), { method, headers: { ...headers, 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, location: res.headers.location }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function expectRefusal(landing: URL, client: TestOAuthClient, state: string) {
  expect(landing.origin + landing.pathname).toBe(client.redirectUri);
  expect(landing.searchParams.get('error')).toBe('temporarily_unavailable');
  expect(landing.searchParams.get('error_description')).toMatch(/More than 60 authorizations of this client in an hour; try again in \d+ minutes?/);
  expect(landing.searchParams.get('state')).toBe(state);
  expect(landing.searchParams.get('iss')).toBe(`${t.baseUrl}${ISSUER_PATH}`);
  expect(landing.searchParams.has('code')).toBe(false);
}

describe('attack: authorization codes without end', () => {
  test('a consented user gets 60 codes an hour from one client; the 61st goes back with temporarily_unavailable and its state, storing nothing; other users, other clients and the next hour go on', async () => {
    const client = await createOAuthClient(t, { name: 'Seller agent' });
    const user = await consentedUser(client); // the first code of the hour, by the consent post
    const landings = await authorizeTimes(user, client, 59, { state: 's'.repeat(1000) });
    expect(codes(landings)).toBe(59);

    const stored = await storedCodes(user);
    const state = 'state-of-the-61st';
    const [refused] = await authorizeTimes(user, client, 1, { state });
    expectRefusal(refused!, client, state);
    expect(await storedCodes(user)).toBe(stored); // nothing stored for the refused one

    // A browser navigation is sent there with a 302, as the library sends its own errors.
    const navigation = await raw('GET', authorizeUrl(client, { challenge: pkcePair().challenge, state }), { cookie: user.cookie });
    expect(navigation.status).toBe(302);
    expectRefusal(new URL(navigation.location!), client, state);
    expect(await storedCodes(user)).toBe(stored);

    // Never sent to a URI the client did not register: the exact match still answers first.
    const unregistered = await followAuthorize(t, authorizeUrl(client, { redirectUri: 'http://127.0.0.1:9/elsewhere' }), user.cookie);
    expect(unregistered.pathname).toBe('/api/auth/error');
    expect(unregistered.searchParams.get('error')).toBe('invalid_redirect');

    // The agent's own flow for another user, and the same user with another agent's client, are not held back.
    const other = await signUp(t);
    expect((await accessTokenFor(t, other, { client })).accessToken).toBeTruthy();
    expect(codes(await authorizeTimes(other, client, 3))).toBe(3);
    const otherClient = await createOAuthClient(t);
    expect((await accessTokenFor(t, user, { client: otherClient })).accessToken).toBeTruthy();
    expect(codes(await authorizeTimes(user, otherClient, 3))).toBe(3);

    // An hour after the first code of the window, the user authorizes the agent again.
    const minutes = Number(/try again in (\d+) minute/.exec(refused!.searchParams.get('error_description')!)![1]);
    expect(minutes).toBeGreaterThan(0);
    expect(minutes).toBeLessThanOrEqual(60);
    t.clock.advance(minutes * 60_000 + 1000);
    expect(codes(await authorizeTimes(user, client, 1))).toBe(1);
  });

  test('an agent seller with one account mints at most 60 refresh tokens an hour by authorizing again and exchanging each code', async () => {
    const client = await createOAuthClient(t, { name: 'Seller agent' });
    const seller = await consentedUser(client);
    const before = await refreshTokensOf(seller, client);
    let minted = 0;
    let refused = 0;
    for (let i = 0; i < 70; i++) {
      const { verifier, challenge } = pkcePair();
      const landing = await followAuthorize(t, authorizeUrl(client, { challenge }), seller.cookie);
      const code = landing.searchParams.get('code');
      if (!code) {
        expect(landing.searchParams.get('error')).toBe('temporarily_unavailable');
        refused++;
        continue;
      }
      const res = await postForm(t, '/api/auth/oauth2/token', client, {
        grant_type: 'authorization_code',
        code,
        redirect_uri: client.redirectUri,
        code_verifier: verifier,
      });
      expect(res.status, res.text).toBe(200);
      if (res.body.refresh_token) minted++;
    }
    expect(minted).toBe(59); // with the first one, by the consent: 60
    expect(refused).toBe(11);
    expect((await refreshTokensOf(seller, client)) - before).toBe(59);
  });
});

describe('only issued codes count', () => {
  test('authorizations that end at the consent page, the sign-in page or an error spend nothing', async () => {
    const client = await createOAuthClient(t);
    const user = await signUp(t);
    // Not consented yet: each goes to the consent page.
    const consentPages = await authorizeTimes(user, client, 30);
    expect(consentPages.every((l) => l.pathname === '/consent')).toBe(true);
    await accessTokenFor(t, user, { client }); // code 1
    // A scope the client may not ask for: the library's error redirect.
    const errors = await authorizeTimes(user, client, 30, { scope: 'openid calendar' });
    expect(errors.every((l) => l.searchParams.get('error') === 'invalid_scope')).toBe(true);
    // prompt=login and prompt=consent: the sign-in and consent pages again.
    for (const prompt of ['login', 'consent']) {
      for (let i = 0; i < 15; i++) {
        const landing = await followAuthorize(t, `${authorizeUrl(client, { challenge: pkcePair().challenge })}&prompt=${prompt}`, user.cookie);
        expect(landing.searchParams.has('code')).toBe(false);
      }
    }
    // Signed out: the sign-in page, counted for nobody.
    for (let i = 0; i < 5; i++) expect((await followAuthorize(t, authorizeUrl(client, { challenge: pkcePair().challenge }))).pathname).toBe('/sign-in');

    // All 60 codes of the hour are still there.
    expect(codes(await authorizeTimes(user, client, 59))).toBe(59);
    expectRefusal((await authorizeTimes(user, client, 1, { state: 'x' }))[0]!, client, 'x');
  });
});

describe('the other endpoints that issue a code take from the same allowance', () => {
  test('the consent post: used up, an accepted consent goes back with temporarily_unavailable and stores nothing; a denial still answers access_denied', async () => {
    const client = await createOAuthClient(t);
    const user = await consentedUser(client);
    // Asked to consent again (the page itself is no code), then the hour's codes are used up before the user answers.
    const landing = await followAuthorize(t, `${authorizeUrl(client, { challenge: pkcePair().challenge, state: 'consent-state' })}&prompt=consent`, user.cookie);
    expect(landing.pathname).toBe('/consent');
    const consentCode = landing.searchParams.get('consent_code')!;
    expect(codes(await authorizeTimes(user, client, 59))).toBe(59);
    const stored = await storedCodes(user);

    const fetched = await t.http.post('/api/auth/oauth2/consent', {
      cookie: user.cookie,
      headers: { origin: t.baseUrl },
      json: { accept: true, consent_code: consentCode },
    });
    expect(fetched.status).toBe(200);
    expect(fetched.body.redirect).toBe(true);
    expectRefusal(new URL(fetched.body.url), client, 'consent-state');

    const form = await raw('POST', '/api/auth/oauth2/consent', {
      cookie: user.cookie,
      origin: t.baseUrl,
      'content-type': 'application/x-www-form-urlencoded',
    }, new URLSearchParams({ accept: 'true', consent_code: consentCode }).toString());
    expect(form.status).toBe(302);
    expectRefusal(new URL(form.location!), client, 'consent-state');
    expect(await storedCodes(user)).toBe(stored);

    const denied = await t.http.post('/api/auth/oauth2/consent', {
      cookie: user.cookie,
      headers: { origin: t.baseUrl },
      json: { accept: false, consent_code: consentCode },
    });
    expect(denied.status).toBe(200);
    expect(new URL(denied.body.url).searchParams.get('error')).toBe('access_denied');
  });

  test("the consent post of a user's first authorization spends one code, and an altered consent code spends nothing", async () => {
    const client = await createOAuthClient(t);
    const user = await signUp(t);
    const landing = await followAuthorize(t, authorizeUrl(client, { challenge: pkcePair().challenge }), user.cookie);
    const consentCode = landing.searchParams.get('consent_code')!;
    const forged = Buffer.from(Buffer.from(consentCode, 'base64url').toString().replace(/scope=[^&]*/, 'scope=openid')).toString('base64url');
    for (let i = 0; i < 5; i++) {
      const res = await t.http.post('/api/auth/oauth2/consent', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { accept: true, consent_code: forged } });
      expect(res.status).toBe(400); // the library's signature check, after the allowance was given back
    }
    const res = await t.http.post('/api/auth/oauth2/consent', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { accept: true, consent_code: consentCode } });
    expect(new URL(res.body.url).searchParams.has('code')).toBe(true);
    expect(codes(await authorizeTimes(user, client, 60))).toBe(59);
  });

  test("the library's continue endpoint, which runs a signed authorization again, is refused the same way once the allowance is used up", async () => {
    const client = await createOAuthClient(t);
    const user = await consentedUser(client);
    // A signed query, as the library puts on the sign-in page of a signed-out authorization.
    const signIn = await followAuthorize(t, authorizeUrl(client, { challenge: pkcePair().challenge, state: 'continue-state' }));
    expect(signIn.pathname).toBe('/sign-in');
    const oauthQuery = signIn.search.slice(1);
    const continued = () =>
      t.http.post('/api/auth/oauth2/continue', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { selected: true, oauth_query: oauthQuery } });

    const first = await continued();
    expect(first.status, first.text).toBe(200);
    expect(new URL(first.body.url).searchParams.has('code')).toBe(true); // it does issue codes: code 2 of the hour
    expect(codes(await authorizeTimes(user, client, 58))).toBe(58);

    const stored = await storedCodes(user);
    const refused = await continued();
    expect(refused.status).toBe(200);
    expectRefusal(new URL(refused.body.url), client, 'continue-state');
    expect(await storedCodes(user)).toBe(stored);
  });

  test('a sign-in carrying the signed query issues a code in its answer: it spends the allowance, and is refused (429) once it is used up', async () => {
    const client = await createOAuthClient(t);
    const user = await consentedUser(client); // code 1 of the hour
    const signIn = await followAuthorize(t, authorizeUrl(client, { challenge: pkcePair().challenge, state: 'sign-in-state' }));
    expect(signIn.pathname).toBe('/sign-in');
    const oauthQuery = signIn.search.slice(1);
    const signInWith = (password: string) =>
      t.http.post('/api/auth/sign-in/email', { headers: { origin: t.baseUrl }, json: { email: user.email, password, oauth_query: oauthQuery } });

    const first = await signInWith(user.password);
    expect(first.status, first.text).toBe(200);
    expect(new URL(first.body.url).searchParams.has('code')).toBe(true); // code 2
    // wrong passwords issue nothing and spend nothing
    for (let i = 0; i < 3; i++) expect((await signInWith('not the password')).status).toBe(401);
    expect(codes(await authorizeTimes(user, client, 58))).toBe(58); // codes 3..60

    const stored = await storedCodes(user);
    const refused = await signInWith(user.password);
    expect([refused.status, refused.body.error?.code]).toEqual([429, 'RATE_LIMITED']);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await storedCodes(user)).toBe(stored);
    // a sign-in without the signed query is not this allowance's business
    expect((await t.http.post('/api/auth/sign-in/email', { headers: { origin: t.baseUrl }, json: { email: user.email, password: user.password } })).status).toBe(200);
  });
});
