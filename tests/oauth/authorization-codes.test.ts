import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, authorizeUrl, createOAuthClient, followAuthorize, pkcePair, postForm, type TestOAuthClient } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * Authorization codes (security rule 24). Once a user has consented to an agent, every authorization of theirs issues
 * a new code: a `verification` row holding the whole request (up to 4 KiB) for 10 minutes, and, exchanged by the
 * agent that owns the client, a refresh-token row kept 30 days. Review 03 found both unbounded (an agent seller with
 * one account of its own minted 100 refresh tokens a minute by authorizing again instead of refreshing). The first
 * answer, refusing the 61st code of an hour, could be set off by somebody else: a page that navigates a popup through
 * authorize 60 times locked the user out of the agent for an hour. Now:
 *   - a client keeps at most 10 live codes per user: an 11th pushes out the oldest, whatever endpoint or library hook
 *     issued it (migration 20261126002200, one trigger on the row every code is);
 *   - the refresh tokens are bounded where only the client can act: 60 exchanges an hour per client and user;
 *   - a cross-site request that is no top-level navigation is taken as signed out, so a stranger's page cannot have
 *     the browser issue codes that push out the user's own.
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

/** The codes the library keeps for this client and user (each a verification row holding the request). */
const storedCodes = async (user: TestUser, client: TestOAuthClient) =>
  (await first<{ n: number }>(
    t.db,
    sql`select count(*)::int as n from "verification"
         where value like ${'{"type":"authorization_code",%'} and value like ${`%"client_id":"${client.clientId}"%`}
           and value like ${`%"userId":"${user.userId}"%`}`,
  ))!.n;

const refreshTokensOf = async (user: TestUser, c: TestOAuthClient) =>
  (await first<{ n: number }>(
    t.db,
    sql`select count(*)::int as n from "oauthRefreshToken" where "userId" = ${user.userId} and "clientId" = ${c.clientId}`,
  ))!.n;

interface IssuedCode {
  code: string;
  verifier: string;
}

/** One authorization of a signed-in user who has consented: the code and its PKCE verifier. */
async function authorize(user: TestUser, client: TestOAuthClient): Promise<IssuedCode> {
  const { verifier, challenge } = pkcePair();
  const landing = await followAuthorize(t, authorizeUrl(client, { challenge }), user.cookie);
  const code = landing.searchParams.get('code');
  expect(code, landing.toString()).not.toBeNull();
  return { code: code!, verifier };
}

const exchange = (client: TestOAuthClient, { code, verifier }: IssuedCode) =>
  postForm(t, '/api/auth/oauth2/token', client, { grant_type: 'authorization_code', code, redirect_uri: client.redirectUri, code_verifier: verifier });

/** A user who has consented to `client` (its one code exchanged) and may authorize again. */
async function consentedUser(client: TestOAuthClient): Promise<TestUser> {
  const user = await signUp(t);
  await accessTokenFor(t, user, { client });
  return user;
}

/** The signed query the library puts on the sign-in page of a signed-out authorization (free to get, reusable). */
async function signedQuery(client: TestOAuthClient): Promise<string> {
  const signIn = await followAuthorize(t, authorizeUrl(client, { challenge: pkcePair().challenge }));
  expect(signIn.pathname).toBe('/sign-in');
  return signIn.search.slice(1);
}

/** A GET with the headers a browser sends for a request of another site's page (raw: Node's fetch adds its own). */
function crossSite(
  path: string,
  cookie: string,
  kind: 'image' | 'navigation' | 'frame',
  referer = 'https://elsewhere.example/',
  extra: Record<string, string> = {},
): Promise<{ status: number; location?: string }> {
  const metadata = {
    image: { accept: 'image/avif,image/webp,*/*;q=0.8', 'sec-fetch-mode': 'no-cors', 'sec-fetch-dest': 'image' },
    navigation: { accept: 'text/html', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document', 'sec-fetch-user': '?1' },
    frame: { accept: 'text/html', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'iframe' },
  }[kind];
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      new URL(path, t.baseUrl),
      { method: 'GET', headers: { cookie, referer, 'sec-fetch-site': 'cross-site', ...metadata, ...extra } },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, location: res.headers.location }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

describe('attack: authorization codes without end', () => {
  test('a consented user authorizing 30 times leaves 10 live codes for that client: the 10 newest exchange, the older are invalid_grant; other users and clients keep theirs', async () => {
    const client = await createOAuthClient(t, { name: 'Seller agent' });
    const user = await consentedUser(client);
    const other = await consentedUser(client);
    const otherClient = await createOAuthClient(t);
    await accessTokenFor(t, user, { client: otherClient });
    const othersCode = await authorize(other, client);
    const otherClientsCode = await authorize(user, otherClient);

    const issued: IssuedCode[] = [];
    for (let i = 0; i < 30; i++) issued.push(await authorize(user, client));
    expect(await storedCodes(user, client)).toBe(10);

    const oldest = await exchange(client, issued[0]!);
    expect([oldest.status, oldest.body.error]).toEqual([400, 'invalid_grant']);
    expect((await exchange(client, issued[19]!)).body.error).toBe('invalid_grant');
    for (const code of issued.slice(20)) expect((await exchange(client, code)).status).toBe(200);
    expect((await exchange(client, othersCode)).status).toBe(200);
    expect((await exchange(otherClient, otherClientsCode)).status).toBe(200);
  });

  test('codes issued at once are bounded too: 25 concurrent authorizations leave 10', async () => {
    const client = await createOAuthClient(t);
    const user = await consentedUser(client);
    const issued = await Promise.all(Array.from({ length: 25 }, () => authorize(user, client)));
    expect(issued).toHaveLength(25);
    expect(await storedCodes(user, client)).toBe(10);
  });

  test('every endpoint that issues a code is bounded alike: the consent post, the library continue endpoint, a sign-in and update-user carrying the signed query', async () => {
    const client = await createOAuthClient(t);
    const user = await consentedUser(client);
    const oauthQuery = await signedQuery(client);
    const codeIn = (body: { url?: unknown } | undefined) => (typeof body?.url === 'string' ? new URL(body.url).searchParams.get('code') : null);
    for (let i = 0; i < 12; i++) {
      const consent = await followAuthorize(t, `${authorizeUrl(client, { challenge: pkcePair().challenge })}&prompt=consent`, user.cookie);
      const accepted = await t.http.post('/api/auth/oauth2/consent', {
        cookie: user.cookie,
        headers: { origin: t.baseUrl },
        json: { accept: true, consent_code: consent.searchParams.get('consent_code') },
      });
      expect(codeIn(accepted.body), accepted.text).not.toBeNull();
      const continued = await t.http.post('/api/auth/oauth2/continue', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { selected: true, oauth_query: oauthQuery } });
      expect(codeIn(continued.body), continued.text).not.toBeNull();
      const signedIn = await t.http.post('/api/auth/sign-in/email', { headers: { origin: t.baseUrl }, json: { email: user.email, password: user.password, oauth_query: oauthQuery } });
      expect(codeIn(signedIn.body), signedIn.text).not.toBeNull();
      const updated = await t.http.post('/api/auth/update-user', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { name: `User ${i}`, oauth_query: oauthQuery } });
      expect(codeIn(updated.body), updated.text).not.toBeNull();
    }
    expect(await storedCodes(user, client)).toBe(10);
  });

  test('an agent seller with one account mints at most 60 refresh tokens an hour by authorizing again and exchanging each code (429 at the token endpoint); the next hour it goes on', async () => {
    const client = await createOAuthClient(t, { name: 'Seller agent' });
    const seller = await consentedUser(client); // exchange 1 of the hour
    const before = await refreshTokensOf(seller, client);
    let minted = 0;
    let refused = 0;
    for (let i = 0; i < 70; i++) {
      const res = await exchange(client, await authorize(seller, client));
      if (res.status === 200) {
        if (res.body.refresh_token) minted++;
        continue;
      }
      expect([res.status, res.body.error]).toEqual([429, 'invalid_request']);
      expect(res.body.error_description).toMatch(/More than 60 codes of this client exchanged for this user in an hour/);
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
      refused++;
    }
    expect(minted).toBe(59);
    expect(refused).toBe(11);
    expect((await refreshTokensOf(seller, client)) - before).toBe(59);
    // authorizing is never refused, and the codes refused at the exchange stay bounded
    expect(await storedCodes(seller, client)).toBeLessThanOrEqual(10);
    t.clock.advance(61 * 60_000);
    expect((await exchange(client, await authorize(seller, client))).status).toBe(200);
  });

  test('a refused exchange (wrong verifier, missing secret) spends nothing of the hour', async () => {
    const client = await createOAuthClient(t);
    const user = await consentedUser(client); // exchange 1
    for (let i = 0; i < 20; i++) {
      const { code } = await authorize(user, client);
      const wrong = await exchange(client, { code, verifier: 'not-the-verifier-of-this-code-0123456789abcdefgh' });
      expect([400, 401]).toContain(wrong.status);
      const noSecret = await postForm(t, '/api/auth/oauth2/token', null, { grant_type: 'authorization_code', code, client_id: client.clientId, redirect_uri: client.redirectUri });
      expect(noSecret.status).toBeGreaterThanOrEqual(400);
    }
    for (let i = 0; i < 59; i++) expect((await exchange(client, await authorize(user, client))).status).toBe(200);
    expect((await exchange(client, await authorize(user, client))).status).toBe(429);
  });
});

describe("attack: a stranger's page locks a user out of an agent", () => {
  test('a popup navigated through authorize 60 times from another site: the user still signs in to the agent at once', async () => {
    const agent = await createOAuthClient(t, { name: 'An agent the victim uses' });
    const victim = await consentedUser(agent);
    for (let i = 0; i < 60; i++) {
      // a top-level navigation is a real authorization, whichever site started it: it issues a code to the agent
      const res = await crossSite(authorizeUrl(agent, { challenge: pkcePair().challenge }), victim.cookie, 'navigation');
      expect(res.status).toBe(302);
      expect(new URL(res.location!).searchParams.has('code')).toBe(true);
    }
    const mine = await authorize(victim, agent);
    expect((await exchange(agent, mine)).status).toBe(200);
  });

  test("60 cross-site image requests to authorize issue nothing, so the user's own sign-in under way keeps its code", async () => {
    const agent = await createOAuthClient(t, { name: 'An agent the victim uses' });
    const victim = await consentedUser(agent);
    const underWay = await authorize(victim, agent);
    for (let i = 0; i < 60; i++) {
      const res = await crossSite(authorizeUrl(agent, { challenge: pkcePair().challenge }), victim.cookie, 'image');
      // taken as signed out: sent to the sign-in page, no code
      expect(new URL(res.location!, t.baseUrl).searchParams.has('code')).toBe(false);
    }
    expect((await exchange(agent, underWay)).status).toBe(200);
  });
});

describe('OpenID Connect silent renew', () => {
  test("a hidden frame on the agent's own page authorizes with prompt=none: a code for a consented user, login/consent_required for a stranger", async () => {
    const agent = await createOAuthClient(t);
    const agentPage = `${new URL(agent.redirectUri).origin}/app`;
    const user = await consentedUser(agent);
    const { verifier, challenge } = pkcePair();
    const renewed = await crossSite(`${authorizeUrl(agent, { challenge, state: 'silent' })}&prompt=none`, user.cookie, 'frame', agentPage);
    expect(renewed.status).toBe(302);
    const landing = new URL(renewed.location!);
    expect(landing.origin + landing.pathname).toBe(agent.redirectUri);
    expect(landing.searchParams.get('state')).toBe('silent');
    expect((await exchange(agent, { code: landing.searchParams.get('code')!, verifier })).status).toBe(200);
    // 'none' read as the library reads prompts (each value trimmed: review 74), so a frame sending 'none<TAB>' renews too
    const tabbed = pkcePair();
    const renewedTabbed = await crossSite(`${authorizeUrl(agent, { challenge: tabbed.challenge })}&prompt=none%09`, user.cookie, 'frame', agentPage);
    const tabbedLanding = new URL(renewedTabbed.location!, t.baseUrl);
    expect(tabbedLanding.origin + tabbedLanding.pathname).toBe(agent.redirectUri);
    expect((await exchange(agent, { code: tabbedLanding.searchParams.get('code')!, verifier: tabbed.verifier })).status).toBe(200);

    const stranger = await signUp(t);
    const refused = await crossSite(`${authorizeUrl(agent, { challenge })}&prompt=none`, stranger.cookie, 'frame', agentPage);
    const answer = new URL(refused.location!, t.baseUrl);
    expect(answer.searchParams.has('code')).toBe(false);
    expect(answer.searchParams.get('error')).toMatch(/^(consent_required|login_required|interaction_required)$/);
  });

  test("attack: ten hidden frames on a stranger's page (no click) would push out the code of the user's sign-in under way: they are signed out", async () => {
    const agent = await createOAuthClient(t, { name: 'An agent the victim uses' });
    const victim = await consentedUser(agent);
    const underWay = await authorize(victim, agent);
    for (const prompt of ['', '&prompt=none']) {
      const framed = await Promise.all(
        Array.from({ length: 10 }, () => crossSite(`${authorizeUrl(agent, { challenge: pkcePair().challenge })}${prompt}`, victim.cookie, 'frame')),
      );
      expect(framed.filter((r) => r.location && new URL(r.location, t.baseUrl).searchParams.has('code'))).toEqual([]);
    }
    // nor a speculative load (prefetch, prerender), which a page asks for without a click (found by a review)
    const { status, location } = await crossSite(authorizeUrl(agent, { challenge: pkcePair().challenge }), victim.cookie, 'navigation', undefined, {
      'sec-purpose': 'prefetch;prerender',
      purpose: 'prefetch',
    });
    expect(status).toBe(302);
    expect(new URL(location!, t.baseUrl).searchParams.has('code')).toBe(false);
    // and a frame on the agent's own page without prompt=none is no silent renew either
    const agentPage = `${new URL(agent.redirectUri).origin}/app`;
    const plain = await crossSite(authorizeUrl(agent, { challenge: pkcePair().challenge }), victim.cookie, 'frame', agentPage);
    expect(new URL(plain.location!, t.baseUrl).searchParams.has('code')).toBe(false);
    expect((await exchange(agent, underWay)).status).toBe(200);
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
