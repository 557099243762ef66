import { randomUUID } from 'node:crypto';
import { SignJWT, decodeJwt, exportJWK, generateKeyPair } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, authorizeInBrowser, basicAuth, clientOfAgent, pkcePair, postForm, type TestOAuthClient } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { meteredAgent, subscribe, type MeteredAgent } from '../metering/support.ts';

/**
 * Access tokens are Bearer tokens, and a revocation revokes what it names (review 38). The library bound a token to the
 * key of a DPoP proof sent with the token request (RFC 9449 `cnf.jkt`, `token_type: "DPoP"`) while the API checks no
 * proof: the agent that asked for the binding could not use its token, and a copy of it worked as Bearer for anyone.
 * And a revocation sent with the other kind's `token_type_hint` answered 200 and revoked nothing.
 */
let t: TestApp;
let user: TestUser;
let x: MeteredAgent;
let client: TestOAuthClient;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-03-10T12:00:00.000Z' });
  user = await signUp(t, { name: 'Ada' });
  x = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
  await subscribe(t, user.userId, x.tierId);
  client = await clientOfAgent(t, x.agentId);
});
afterAll(() => t.close());

/** A code exchange carrying a DPoP proof of a fresh key, sent to `send` (our token endpoint, or the library's own). */
async function exchangeWithProof(send: (request: Request) => Promise<Response>) {
  const { verifier, challenge } = pkcePair();
  const { code } = await authorizeInBrowser(t, user, client, { challenge, scope: 'openid offline_access' });
  const { publicKey, privateKey } = await generateKeyPair('ES256');
  const tokenUrl = `${t.baseUrl}/api/auth/oauth2/token`;
  const proof = await new SignJWT({ jti: randomUUID(), htm: 'POST', htu: tokenUrl, iat: Math.floor(Date.now() / 1000) }) // the library checks it against the real time
    .setProtectedHeader({ typ: 'dpop+jwt', alg: 'ES256', jwk: await exportJWK(publicKey) })
    .sign(privateKey);
  const form = new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: client.redirectUri, code_verifier: verifier, resource: `${t.baseUrl}/agents/${x.agentId}` });
  const res = await send(new Request(tokenUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basicAuth(client), dpop: proof },
    body: form.toString(),
  }));
  return { status: res.status, body: (await res.json()) as { token_type?: string; access_token?: string } };
}

const usageWrite = (token: string) =>
  t.http.post(`/me/usage/${x.agentId}/calls/increment`, { bearer: token, json: { amount: 1, clientReqId: randomUUID() } });

describe('DPoP', () => {
  it('is not advertised: the discovery documents name no DPoP algorithm and no back-channel logout', async () => {
    for (const path of ['/api/auth/.well-known/openid-configuration', '/.well-known/oauth-authorization-server/api/auth']) {
      const res = await t.http.get(path);
      expect(res.status).toBe(200);
      expect(res.body).not.toHaveProperty('dpop_signing_alg_values_supported');
      expect(res.body).not.toHaveProperty('backchannel_logout_supported');
    }
  });

  it('a token request with a DPoP proof gets a Bearer token, bound to nothing, that works as Bearer', async () => {
    const res = await exchangeWithProof((request) => fetch(request));
    expect(res.status).toBe(200);
    expect(res.body.token_type?.toLowerCase()).toBe('bearer');
    expect(decodeJwt(res.body.access_token!)).not.toHaveProperty('cnf');
    expect((await t.http.get('/me', { bearer: res.body.access_token! })).status).toBe(200);
  });

  it('attack: a key-bound token (made by the library past our token endpoint) is refused as Bearer, reads and usage writes alike', async () => {
    const bound = await exchangeWithProof((request) => t.deps.auth.handler(request));
    expect(bound.status, JSON.stringify(bound.body)).toBe(200);
    expect(decodeJwt(bound.body.access_token!)).toHaveProperty('cnf.jkt');
    const [me, write] = await Promise.all([t.http.get('/me', { bearer: bound.body.access_token! }), usageWrite(bound.body.access_token!)]);
    expect({ me: me.status, write: write.status }).toEqual({ me: 401, write: 401 });
    expect(me.body.error.message).toMatch(/bound to a key/);
  });
});

describe('revocation whatever the hint says (RFC 7009 §2.1)', () => {
  it('attack: an access token sent with token_type_hint=refresh_token is revoked, not only answered 200', async () => {
    const tokens = await accessTokenFor(t, user, { agentId: x.agentId });
    const res = await postForm(t, '/api/auth/oauth2/revoke', client, { token: tokens.accessToken, token_type_hint: 'refresh_token' });
    expect(res.status).toBe(200);
    expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(401);
  });

  it("a revoked token is a 401 on its agent's public reads too, as /openapi.json says (review 82: they answered 200 as anonymous)", async () => {
    const tokens = await accessTokenFor(t, user, { agentId: x.agentId });
    const paths = [`/agents/${x.agentId}`, `/agents/${x.agentId}/reviews`, `/agents/${x.agentId}/pricing`];
    for (const path of paths) expect([path, (await t.http.get(path, { bearer: tokens.accessToken })).status]).toEqual([path, 200]);
    expect((await postForm(t, '/api/auth/oauth2/revoke', client, { token: tokens.accessToken })).status).toBe(200);
    for (const path of paths) {
      const res = await t.http.get(path, { bearer: tokens.accessToken });
      expect([path, res.status, res.body.error?.code]).toEqual([path, 401, 'UNAUTHORIZED']);
      expect([path, (await t.http.get(path)).status]).toEqual([path, 200]); // anonymous still reads them
    }
    // the catalog's list names no agent: the token reads it as anyone (no 401 is documented there)
    expect((await t.http.get('/agents', { bearer: tokens.accessToken })).status).toBe(200);
  });

  it('an access token sent as "Bearer <token>" is revoked, as its introspection reads it (review 93)', async () => {
    // The wrapper judged "Bearer <jwt>" as no JWT and revoked nothing, while the introspection of the same value
    // answered active: a client checking its revocation with it saw a live token as revoked.
    const tokens = await accessTokenFor(t, user, { agentId: x.agentId });
    const active = await postForm(t, '/api/auth/oauth2/introspect', client, { token: `Bearer ${tokens.accessToken}` });
    expect([active.status, active.body.active]).toEqual([200, true]);
    expect((await postForm(t, '/api/auth/oauth2/revoke', client, { token: `Bearer ${tokens.accessToken}` })).status).toBe(200);
    expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(401);
    const inactive = await postForm(t, '/api/auth/oauth2/introspect', client, { token: `Bearer ${tokens.accessToken}` });
    expect([inactive.status, inactive.body.active]).toEqual([200, false]);
  });

  it('attack: a refresh token sent with token_type_hint=access_token is revoked, not only answered 200', async () => {
    const tokens = await accessTokenFor(t, user, { agentId: x.agentId });
    const res = await postForm(t, '/api/auth/oauth2/revoke', client, { token: tokens.refreshToken!, token_type_hint: 'access_token' });
    expect(res.status).toBe(200);
    const refresh = await postForm(t, '/api/auth/oauth2/token', client, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken! });
    expect({ status: refresh.status, error: refresh.body.error }).toEqual({ status: 400, error: 'invalid_grant' });
  });

  it("control: another client's token is not revoked, whatever the hint", async () => {
    const tokens = await accessTokenFor(t, user, { agentId: x.agentId });
    const other = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const otherClient = await clientOfAgent(t, other.agentId);
    for (const [token, hint] of [[tokens.accessToken, 'refresh_token'], [tokens.refreshToken!, 'access_token'], [tokens.refreshToken!, 'refresh_token']] as const) {
      expect((await postForm(t, '/api/auth/oauth2/revoke', otherClient, { token, token_type_hint: hint })).status).toBe(200);
    }
    expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(200);
    expect((await postForm(t, '/api/auth/oauth2/token', client, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken! })).status).toBe(200);
  });
});
