import { randomUUID } from 'node:crypto';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWTPayload } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { runHousekeeping } from '../../functions/internal/background-work.ts';
import { KEY_RECHECK_MS } from '../../functions/auth/authenticator.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { insertAgent, type AgentRow } from '../support/fixtures.ts';
import { clientOfAgent, createFirstPartyClient } from '../support/oauth.ts';

/**
 * The Authenticator's bearer rules, each on its own: issuer, audience, expiry, `typ`, algorithm and key.
 * To vary one claim at a time the test adds its own signing key to the `jwks` table (which is what "a key of
 * this server" means to the Authenticator) and signs tokens with it; tokens from the real OAuth flow are
 * covered in bearer-flow.test.ts.
 */
let t: TestApp;
let user: TestUser;
let admin: TestUser;
let privateKey: CryptoKey;
let agent: AgentRow;
let agentClientId: string;
let firstPartyClientId: string;
const kid = `test-${randomUUID()}`;

beforeAll(async () => {
  t = await startTestApp();
  const pair = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
  privateKey = pair.privateKey;
  const jwk = await exportJWK(pair.publicKey);
  await sql`insert into jwks (id, "publicKey", "privateKey", "createdAt", alg, crv)
            values (${kid}, ${JSON.stringify(jwk)}, 'held by the test', now(), 'EdDSA', 'Ed25519')`.execute(t.db);
  user = await signUp(t);
  admin = await createAdmin(t);
  agent = await insertAgent(t.db);
  agentClientId = (await clientOfAgent(t, agent.id)).clientId;
  firstPartyClientId = (await createFirstPartyClient(t)).clientId;
});
afterAll(() => t.close());

interface TokenOptions {
  claims?: JWTPayload;
  header?: Record<string, unknown>;
  key?: CryptoKey;
  kid?: string;
  expiresInSec?: number;
}

/**
 * A token as the token endpoint mints them for an agent's client (aud: the agent's resource, client_id: its client),
 * unless the claims say otherwise; `firstParty` makes it the marketplace's first-party admin token (aud: the API).
 */
async function token(sub: string, options: TokenOptions & { firstParty?: boolean } = {}): Promise<string> {
  const now = Math.floor(t.clock.now().getTime() / 1000);
  return new SignJWT({
    sub,
    iss: `${t.baseUrl}/api/auth`,
    aud: options.firstParty ? t.baseUrl : [`${t.baseUrl}/agents/${agent.id}`, `${t.baseUrl}/api/auth/oauth2/userinfo`],
    client_id: options.firstParty ? firstPartyClientId : agentClientId,
    scope: options.firstParty ? 'openid admin' : 'openid profile email', // an agent's: what a user's full consent gives
    sid: randomUUID(),
    jti: randomUUID(),
    role: 'authenticated',
    iat: now,
    exp: now + (options.expiresInSec ?? 3600),
    ...options.claims,
  })
    .setProtectedHeader({ alg: 'EdDSA', typ: 'at+jwt', kid: options.kid ?? kid, ...options.header })
    .sign(options.key ?? privateKey);
}

const me = (bearer: string) => t.http.get('/me', { bearer });

describe('bearer access tokens', () => {
  it('a valid token of this server authenticates the user on /me (an agent sees id, email and name)', async () => {
    const res = await me(await token(user.userId));
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ id: user.userId, email: user.email, name: expect.any(String) });
  });

  it('the role comes from the user row, not from the token', async () => {
    const res = await me(await token(admin.userId, { firstParty: true, claims: { role: 'user' } }));
    expect(res.body.data.role).toBe('platform_admin');
    const plain = await me(await token(user.userId, { firstParty: true, claims: { role: 'platform_admin' } }));
    expect(plain.body.data.role).toBe('user');
  });

  it("rejects an audience that names no agent, two agents, or an agent whose client the token does not carry", async () => {
    const other = await insertAgent(t.db);
    const otherClientId = (await clientOfAgent(t, other.id)).clientId;
    const base = `${t.baseUrl}/agents/`;
    for (const claims of [
      { aud: `${base}not-a-uuid` },
      { aud: [`${base}${agent.id}`, `${base}${other.id}`] },
      { aud: [`${base}${agent.id}`, t.baseUrl] },
      { aud: `${base}${agent.id}`, client_id: otherClientId },
      { aud: t.baseUrl, client_id: agentClientId },
      { client_id: undefined },
    ]) {
      const res = await me(await token(user.userId, { claims }));
      expect([res.status, res.body.error?.code], JSON.stringify(claims)).toEqual([401, 'UNAUTHORIZED']);
    }
    const wrong = await me(await token(user.userId, { claims: { aud: `${base}${agent.id}`, client_id: otherClientId } }));
    expect(wrong.body.error.message).toBe('The access token was not issued to a client of the agent it names');
  });

  it('rejects a token signed by a key this server never issued (same kid)', async () => {
    const foreign = await generateKeyPair('EdDSA', { crv: 'Ed25519' });
    const res = await me(await token(user.userId, { key: foreign.privateKey }));
    expect(res.status).toBe(401);
    expect(res.body.error).toMatchObject({ code: 'UNAUTHORIZED', details: { signInUrl: `${t.baseUrl}/sign-in` } });
  });

  it('rejects a token naming an unknown key', async () => {
    const foreign = await generateKeyPair('EdDSA', { crv: 'Ed25519' });
    expect((await me(await token(user.userId, { key: foreign.privateKey, kid: 'someone-else' }))).status).toBe(401);
  });

  it('rejects alg "none" (unsigned) tokens', async () => {
    const good = await token(user.userId);
    const [, payload] = good.split('.');
    const header = Buffer.from(JSON.stringify({ alg: 'none', typ: 'at+jwt', kid })).toString('base64url');
    expect((await me(`${header}.${payload}.`)).status).toBe(401);
  });

  it('rejects a token whose header claims another algorithm than its key', async () => {
    const good = await token(user.userId);
    const [, payload, signature] = good.split('.');
    const header = Buffer.from(JSON.stringify({ alg: 'HS256', typ: 'at+jwt', kid })).toString('base64url');
    expect((await me(`${header}.${payload}.${signature}`)).status).toBe(401);
  });

  it('rejects a tampered payload', async () => {
    const good = await token(user.userId);
    const [header, , signature] = good.split('.');
    const payload = Buffer.from(JSON.stringify({ sub: admin.userId, iss: `${t.baseUrl}/api/auth`, aud: t.baseUrl })).toString('base64url');
    expect((await me(`${header}.${payload}.${signature}`)).status).toBe(401);
  });

  it('rejects the wrong issuer, the wrong audience and a token that is not an access token (typ)', async () => {
    expect((await me(await token(user.userId, { claims: { iss: 'https://elsewhere.example/api/auth' } }))).status).toBe(401);
    expect((await me(await token(user.userId, { claims: { aud: 'https://other-api.example' } }))).status).toBe(401);
    expect((await me(await token(user.userId, { header: { typ: 'JWT' } }))).status).toBe(401);
  });

  it('rejects an expired token (the clock is the service’s)', async () => {
    const tok = await token(user.userId, { expiresInSec: 10 * 3600 });
    expect((await me(tok)).status).toBe(200);
    t.clock.advance(10 * 3600 * 1000 + 1000);
    try {
      const res = await me(tok);
      expect(res.status).toBe(401);
      expect(res.body.error.message).toMatch(/expired/);
    } finally {
      t.clock.advance(-(10 * 3600 * 1000 + 1000));
    }
  });

  it('rejects garbage and a malformed Authorization header', async () => {
    expect((await me('not-a-jwt')).status).toBe(401);
    const basic = await t.http.get('/me', { headers: { authorization: 'Basic dXNlcjpwYXNz' } });
    expect(basic.status).toBe(401);
    expect(basic.body.error.details.signUpUrl).toBe(`${t.baseUrl}/sign-up`);
  });

  it('tells a backend how to get a token: the RFC 6750 challenge and the OAuth metadata document, which lists the token endpoint', async () => {
    const bad = await me('not-a-jwt');
    expect(bad.status).toBe(401);
    expect(bad.headers.get('www-authenticate')).toBe(`Bearer realm="${t.baseUrl}", error="invalid_token"`);
    const none = await t.http.get('/me');
    expect(none.headers.get('www-authenticate')).toBe(`Bearer realm="${t.baseUrl}"`);
    const metadataUrl = bad.body.error.details.authorizationServer;
    const metadata = await t.http.get(new URL(metadataUrl).pathname);
    expect(metadata.status).toBe(200);
    expect(metadata.body).toMatchObject({ issuer: expect.any(String), token_endpoint: `${t.baseUrl}/api/auth/oauth2/token` });
  });

  it('rejects a token of a deleted user', async () => {
    const gone = await signUp(t);
    const tok = await token(gone.userId);
    expect((await me(tok)).status).toBe(200);
    await sql`delete from "user" where id = ${gone.userId}`.execute(t.db);
    expect((await me(tok)).status).toBe(401);
  });

  it('rejects a revoked token (jti) and every token of a revoked grant (sid) on the next request', async () => {
    const sid = randomUUID();
    const jti = randomUUID();
    const revokedOne = await token(user.userId, { claims: { jti, sid: randomUUID() } });
    const ofGrant = await token(user.userId, { claims: { sid } });
    const unrelated = await token(user.userId);
    expect((await me(revokedOne)).status).toBe(200);
    expect((await me(ofGrant)).status).toBe(200);
    const later = new Date(Date.now() + 11 * 3600_000);
    await sql`insert into revoked_tokens (key, expires_at) values (${`jti:${jti}`}, ${later}), (${`grant:${sid}`}, ${later})`.execute(t.db);
    expect((await me(revokedOne)).status).toBe(401);
    expect((await me(ofGrant)).status).toBe(401);
    expect((await me(unrelated)).status).toBe(200);
  });

  it('a ban kills live tokens on the next request, and they stay dead after an unban; new tokens work again', async () => {
    const victim = await signUp(t);
    const before = await token(victim.userId, { claims: { iat: Math.floor(Date.now() / 1000) - 5 } });
    expect((await me(before)).status).toBe(200);
    expect((await t.http.post(`/admin/users/${victim.userId}/ban`, { cookie: admin.cookie, json: {} })).status).toBe(200);
    expect((await me(before)).status).toBe(401);
    expect((await t.http.post(`/admin/users/${victim.userId}/unban`, { cookie: admin.cookie })).status).toBe(200);
    expect((await me(before)).status).toBe(401);
    const after = await token(victim.userId, { claims: { iat: Math.floor(Date.now() / 1000) + 2 } });
    expect((await me(after)).status).toBe(200);
  });

  it('the cookie wins over a bearer token when both are sent', async () => {
    const res = await t.http.get('/me', { cookie: admin.cookie, bearer: await token(user.userId) });
    expect(res.body.data.id).toBe(admin.userId);
  });

  it("a bearer-authenticated write needs no Origin (automation is not a browser); an agent's token is never admin", async () => {
    const target = await signUp(t);
    const asAgent = await t.http.put(`/admin/users/${target.userId}/role`, {
      bearer: await token(admin.userId),
      json: { role: 'platform_admin' },
      headers: { origin: 'https://agent-backend.example' },
    });
    expect([asAgent.status, asAgent.body.error?.code]).toEqual([403, 'FORBIDDEN']);
    const res = await t.http.put(`/admin/users/${target.userId}/role`, {
      bearer: await token(admin.userId, { firstParty: true }),
      json: { role: 'user' },
      headers: { origin: 'https://back-office.example' },
    });
    expect(res.status).toBe(200);
  });

  it('pruning the revocation list drops only rows whose tokens have all expired', async () => {
    const jti = randomUUID();
    const live = await token(user.userId, { claims: { jti } });
    const now = t.clock.now();
    const expiredJti = randomUUID();
    // (expired ten minutes ago: the housekeeping runs 5 minutes behind the database's clock, review 99)
    await sql`insert into revoked_tokens (key, expires_at) values
                (${`jti:${jti}`}, ${new Date(now.getTime() + 3600_000)}),
                (${`jti:${expiredJti}`}, ${new Date(now.getTime() - 10 * 60_000)})`.execute(t.db);
    expect((await runHousekeeping(t.deps)).revokedTokensPruned).toBeGreaterThanOrEqual(1);
    const left = await rows<{ key: string }>(t.db, sql`select key from revoked_tokens where key in (${`jti:${jti}`}, ${`jti:${expiredJti}`})`);
    expect(left.map((r) => r.key)).toEqual([`jti:${jti}`]);
    expect((await me(live)).status).toBe(401);
  });

  it('attack: a signing key deleted from the key table (a leaked one) stops its tokens within the recheck time', async () => {
    // Its own key, so the other cases keep theirs.
    const leaked = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
    const leakedKid = `leaked-${randomUUID()}`;
    await sql`insert into jwks (id, "publicKey", "privateKey", "createdAt", alg, crv)
              values (${leakedKid}, ${JSON.stringify(await exportJWK(leaked.publicKey))}, 'held by the test', now(), 'EdDSA', 'Ed25519')`.execute(t.db);
    // (An unknown kid makes the service re-read its keys at most every few seconds; the other cases just did.)
    t.clock.advance(KEY_RECHECK_MS);
    const signed = await token(user.userId, { key: leaked.privateKey, kid: leakedKid });
    expect((await me(signed)).status).toBe(200);

    await sql`delete from jwks where id = ${leakedKid}`.execute(t.db);
    t.clock.advance(KEY_RECHECK_MS + 1_000);
    // The token this instance already verified and remembered, and a new one forged with the leaked key.
    const remembered = await me(signed);
    expect([remembered.status, remembered.body.error?.message]).toEqual([401, 'The access token is not signed by this server']);
    expect((await me(await token(user.userId, { key: leaked.privateKey, kid: leakedKid }))).status).toBe(401);
    // The server's own keys are still trusted after the recheck.
    expect((await me(await token(user.userId))).status).toBe(200);
  });
});
