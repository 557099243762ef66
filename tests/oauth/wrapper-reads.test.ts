import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, authorizeInBrowser, basicAuth, createOAuthClient, pkcePair, postForm, type TestOAuthClient } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * Where our wrappers in front of the auth library's OAuth endpoints (functions/auth/oauth/protocol-gaps.ts) and the
 * library could read one request two ways, and the attacks that used it (found by a review):
 *   - a repeated form field: the wrappers read the first value, the library's form parser the last. Every field may
 *     now be sent once (RFC 6749 §3.1, §3.2), `resource` excepted (RFC 8707);
 *   - the userinfo token: the library also takes an Authorization header with no scheme, which went past our
 *     revocation check; userinfo now makes the check every API route makes, with the library's own parser;
 *   - a refresh: the library copies the refresh token's scopes whatever the consent says now;
 *   - a made-up token's claims, looked up before anything verified them (a 500).
 */

let t: TestApp;
let agent: TestOAuthClient;

beforeAll(async () => {
  t = await startTestApp();
  agent = await createOAuthClient(t, { name: 'Wrapper-reads Agent' });
});
afterAll(async () => {
  await t?.close();
});

const withdrawConsent = async (user: TestUser) => {
  const consents = await t.http.get('/api/auth/oauth2/get-consents', { cookie: user.cookie });
  const consent = consents.body.find((c: { clientId: string }) => c.clientId === agent.clientId);
  const withdraw = await t.http.post('/api/auth/oauth2/delete-consent', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { id: consent.id } });
  expect(withdraw.status).toBe(200);
};

/** The code-exchange form, with grant_type sent twice: the wrapper reads the first, the library the last. */
function smuggledCodeExchange(code: string, verifier: string): string {
  const form = new URLSearchParams();
  form.append('grant_type', 'refresh_token');
  form.append('grant_type', 'authorization_code');
  form.append('code', code);
  form.append('redirect_uri', agent.redirectUri);
  form.append('code_verifier', verifier);
  return form.toString();
}

const liveTokens = (user: TestUser) =>
  first<{ refresh: number; access: number }>(
    t.db,
    sql`select (select count(*)::int from "oauthRefreshToken" where "userId" = ${user.userId} and revoked is null) as refresh,
               (select count(*)::int from public.oauth_issued_access_tokens i
                 where i.user_id = ${user.userId} and not exists (select 1 from public.revoked_tokens r where r.key = 'jti:' || i.jti)) as access`,
  );
const ROGUE = 'http://127.0.0.1:4444/callback';

function duplicateRedirectForm(challenge: string): string {
  const form = new URLSearchParams({
    response_type: 'code',
    client_id: agent.clientId,
    scope: 'openid',
    state: 'st',
    code_challenge: challenge,
    code_challenge_method: 'S256',
  });
  form.append('redirect_uri', agent.redirectUri);
  form.append('redirect_uri', ROGUE);
  return form.toString();
}

/** Where an answer of the authorize/consent endpoints sends the browser (302 or the fetch-style JSON). */
function target(res: { status: number; headers: Headers; body: any }): URL | undefined {
  const location = res.headers.get('location') ?? (res.body?.redirect === true ? res.body.url : undefined);
  return typeof location === 'string' ? new URL(location, t.baseUrl) : undefined;
}

describe('redirect_uri is matched exactly, however often the form repeats it', () => {
  test('a user who already consented is not sent with a code to an unregistered loopback port', async () => {
    const user = await signUp(t);
    await accessTokenFor(t, user, { client: agent, scope: 'openid' }); // consent given once, legitimately
    const { challenge } = pkcePair();
    const res = await t.http.post('/api/auth/oauth2/authorize', {
      cookie: user.cookie,
      headers: { origin: t.baseUrl, 'content-type': 'application/x-www-form-urlencoded' },
      body: duplicateRedirectForm(challenge),
    });
    const landing = target(res);
    expect(`${landing?.origin}${landing?.pathname}`).not.toBe(ROGUE);
    expect(landing?.searchParams.get('code') ?? null).toBeNull();
  });

  test('attack: a server asks, with no session, for a signed query naming an unregistered loopback port: refused, nothing signed', async () => {
    // The signed query the library sends to sign-in would be a consent link on the marketplace's own origin, and
    // the victim's Allow would send the code to the attacker's port.
    const { challenge } = pkcePair();
    const anon = await t.http.post('/api/auth/oauth2/authorize', {
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: duplicateRedirectForm(challenge),
    });
    const landing = target(anon)!;
    expect(`${landing.origin}${landing.pathname}`).toBe(`${t.baseUrl}/api/auth/error`);
    expect(landing.searchParams.get('error')).toBe('invalid_request');
    expect(landing.searchParams.get('error_description')).toBe('redirect_uri is sent more than once');
    expect(landing.searchParams.get('sig')).toBeNull();
    expect(landing.toString()).not.toContain('4444');
  });

  test('attack: an authorization posted as JSON is refused (its redirect_uri would go unread by the exact match)', async () => {
    const { challenge } = pkcePair();
    const res = await t.http.post('/api/auth/oauth2/authorize', {
      json: { response_type: 'code', client_id: agent.clientId, scope: 'openid', state: 'st', code_challenge: challenge,
              code_challenge_method: 'S256', redirect_uri: ROGUE },
    });
    const landing = target(res)!;
    expect(landing.searchParams.get('error')).toBe('invalid_request');
    expect(landing.toString()).not.toContain('4444');
  });

  test('a repeated field on the token, revocation, introspection and userinfo endpoints is invalid_request', async () => {
    for (const path of ['/api/auth/oauth2/token', '/api/auth/oauth2/revoke', '/api/auth/oauth2/introspect', '/api/auth/oauth2/userinfo']) {
      const res = await t.http.post(path, {
        headers: { authorization: basicAuth(agent), 'content-type': 'application/x-www-form-urlencoded' },
        body: 'token=a&token=b&access_token=a&access_token=b&grant_type=refresh_token&refresh_token=a&refresh_token=b',
      });
      expect({ path, status: res.status, error: res.body.error }).toEqual({ path, status: 400, error: 'invalid_request' });
    }
  });
});

describe('a code redeemed after the user withdrew consent gives nothing, however grant_type is spelled', () => {
  test('attack: grant_type sent twice redeems a held-back code after the withdrawal', async () => {
    const user = await signUp(t);
    const { verifier, challenge } = pkcePair();
    const { code } = await authorizeInBrowser(t, user, agent, { challenge, scope: 'openid profile email offline_access' });

    // The user withdraws consent before the agent exchanges the code
    await withdrawConsent(user);

    const res = await t.http.post('/api/auth/oauth2/token', {
      headers: { authorization: basicAuth(agent), 'content-type': 'application/x-www-form-urlencoded' },
      body: smuggledCodeExchange(code, verifier),
    });
    const me = typeof res.body?.access_token === 'string' ? await t.http.get('/me', { bearer: res.body.access_token }) : undefined;
    expect({ status: res.status, accessToken: typeof res.body?.access_token, me: me?.status ?? null }).toEqual({
      status: 400,
      accessToken: 'undefined',
      me: null,
    });
    expect(await liveTokens(user)).toEqual({ refresh: 0, access: 0 });
  });
});

const userinfoRaw = (token: string) => t.http.get('/api/auth/oauth2/userinfo', { headers: { authorization: token } });

describe('userinfo refuses a token that is refused everywhere else, however the header spells it', () => {
  test('a revoked access token sent without the Bearer scheme gets no user claims', async () => {
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user, { client: agent });
    const revoke = await postForm(t, '/api/auth/oauth2/revoke', agent, { token: tokens.accessToken, token_type_hint: 'access_token' });
    expect(revoke.status).toBe(200);
    // held: the spelling the wrapper knows
    expect((await t.http.get('/api/auth/oauth2/userinfo', { bearer: tokens.accessToken })).status).toBe(401);
    expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(401);

    const res = await userinfoRaw(tokens.accessToken);
    expect({ status: res.status, email: res.body?.email }).toEqual({ status: 401, email: undefined });
  });

  test("a banned user's token sent without the Bearer scheme gets no user claims", async () => {
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user, { client: agent });
    // the user signs out; offline access goes on with a token that carries no sid, so the library's own session
    // look-up cannot catch the ban
    expect((await t.http.post('/api/auth/sign-out', { cookie: user.cookie, headers: { origin: t.baseUrl } })).status).toBe(200);
    const refreshed = await postForm(t, '/api/auth/oauth2/token', agent, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken });
    expect(refreshed.status).toBe(200);
    const token = refreshed.body.access_token as string;
    const admin = await createAdmin(t);
    const ban = await t.http.post('/api/auth/admin/ban-user', { cookie: admin.cookie, headers: { origin: t.baseUrl }, json: { userId: user.userId } });
    expect(ban.status).toBe(200);
    expect((await t.http.get('/me', { bearer: token })).status).toBe(401);
    expect((await t.http.get('/api/auth/oauth2/userinfo', { bearer: token })).status).toBe(401);

    const res = await userinfoRaw(token);
    expect({ status: res.status, email: res.body?.email }).toEqual({ status: 401, email: undefined });
  });

  test('after the user withdrew consent, a refreshed (sid-less) token sent without the scheme gets no user claims', async () => {
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user, { client: agent });
    const refreshed = await postForm(t, '/api/auth/oauth2/token', agent, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken });
    expect(refreshed.status).toBe(200);
    await withdrawConsent(user);
    expect((await t.http.get('/me', { bearer: refreshed.body.access_token })).status).toBe(401);

    const res = await userinfoRaw(refreshed.body.access_token);
    expect({ status: res.status, email: res.body?.email }).toEqual({ status: 401, email: undefined });
  });
});

describe('a narrowed consent also narrows what a refresh gives', () => {
  test('attack: after the user keeps only openid, a refresh gives nothing more (the grant ends)', async () => {
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user, { client: agent }); // openid profile email offline_access
    const consents = await t.http.get('/api/auth/oauth2/get-consents', { cookie: user.cookie });
    const consent = consents.body.find((c: { clientId: string }) => c.clientId === agent.clientId);
    const narrowed = await t.http.post('/api/auth/oauth2/update-consent', {
      cookie: user.cookie,
      headers: { origin: t.baseUrl },
      json: { id: consent.id, update: { scopes: ['openid'] } },
    });
    expect(narrowed.status, narrowed.text).toBe(200);
    // Introspection says so as well (review 108: it called the refresh token active, with the scopes taken back).
    const introspect = (token: string) => postForm(t, '/api/auth/oauth2/introspect', agent, { token, token_type_hint: 'refresh_token' });
    expect((await introspect(tokens.refreshToken)).body).toEqual({ active: false });

    // The grant ends (as a code redeemed after the narrowing does): the agent asks the user again, for what it may have.
    const refresh = await postForm(t, '/api/auth/oauth2/token', agent, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken });
    expect({ status: refresh.status, error: refresh.body.error }).toEqual({ status: 400, error: 'invalid_grant' });
    const again = await postForm(t, '/api/auth/oauth2/token', agent, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken });
    expect(again.status).toBe(400);
    // A consent left as it was changes nothing: another user's refresh goes on.
    const other = await signUp(t);
    const kept = await accessTokenFor(t, other, { client: agent });
    expect((await introspect(kept.refreshToken)).body).toMatchObject({ active: true, scope: 'openid profile email offline_access' });
    expect((await postForm(t, '/api/auth/oauth2/token', agent, { grant_type: 'refresh_token', refresh_token: kept.refreshToken })).status).toBe(200);
  });

  test('attack: the access tokens issued before the narrowing stop at once; a change that takes nothing away ends nothing', async () => {
    // They kept every scope they carried for up to 10 hours: the agent went on reading the email taken back.
    const user = await signUp(t);
    const first = await accessTokenFor(t, user, { client: agent }); // openid profile email offline_access
    const consents = await t.http.get('/api/auth/oauth2/get-consents', { cookie: user.cookie });
    const consent = consents.body.find((c: { clientId: string }) => c.clientId === agent.clientId);
    const update = (scopes: string[]) =>
      t.http.post('/api/auth/oauth2/update-consent', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { id: consent.id, update: { scopes } } });
    const works = async (accessToken: string) => ({
      me: (await t.http.get('/me', { bearer: accessToken })).status,
      userinfo: (await t.http.get('/api/auth/oauth2/userinfo', { bearer: accessToken })).status,
    });

    // The same scopes in another order take nothing away.
    expect((await update(['offline_access', 'email', 'profile', 'openid'])).status).toBe(200);
    expect(await works(first.accessToken)).toEqual({ me: 200, userinfo: 200 });

    // Another user's tokens for the same agent are not this consent's.
    const other = await signUp(t);
    const othersTokens = await accessTokenFor(t, other, { client: agent });

    expect((await update(['openid', 'profile', 'offline_access'])).status).toBe(200);
    expect(await works(first.accessToken)).toEqual({ me: 401, userinfo: 401 });
    expect(await works(othersTokens.accessToken)).toEqual({ me: 200, userinfo: 200 });
  });
});

const b64 = (o: unknown) => Buffer.from(typeof o === 'string' ? o : JSON.stringify(o)).toString('base64url');
/** A compact JWS with the given payload text and a bogus signature. */
const forged = (payload: string | object, typ = 'at+jwt') => `${b64({ alg: 'EdDSA', typ, kid: 'made-up' })}.${b64(payload)}.c2ln`;

describe('a made-up token is a 4xx, never a 500', () => {
  test.each([
    ['a NUL in sub', forged('{"sub":"a\\u0000b","jti":"j","iat":1}')],
    ['a NUL in jti', forged('{"sub":"u","jti":"a\\u0000b","iat":1}')],
    ['an iat beyond any Date', forged({ sub: 'u', jti: 'j', iat: 1e20 })],
    ['a key id this server never had (the library itself answers 500 for it)', forged({ sub: 'u', jti: 'j', iat: 1 })],
  ])('userinfo with %s', async (_name, token) => {
    const res = await t.http.get('/api/auth/oauth2/userinfo', { bearer: token });
    expect({ status: res.status, error: res.body?.error }).toEqual({ status: 401, error: 'invalid_token' });
  });

  test('end-session with an id_token_hint whose aud holds a NUL', async () => {
    const hint = forged('{"sub":"u","aud":"a\\u0000b","sid":"s","iss":"x"}', 'JWT');
    const user = await signUp(t);
    const variants: Array<{ headers: Record<string, string>; cookie?: string }> = [
      { headers: {} },
      { headers: { 'sec-fetch-mode': 'navigate' } },
      { headers: { 'sec-fetch-mode': 'navigate' }, cookie: user.cookie }, // a browser with a session
    ];
    for (const variant of variants) {
      const res = await t.http.get(`/api/auth/oauth2/end-session?id_token_hint=${hint}`, variant);
      expect({ status: res.status, error: res.body?.error }).toEqual({ status: 400, error: 'invalid_request' });
    }
    expect((await t.http.get('/api/auth/get-session', { cookie: user.cookie })).body?.user?.id).toBe(user.userId);
  });
});
