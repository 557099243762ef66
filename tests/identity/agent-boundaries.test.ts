import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { encodeConsentCode } from '../../functions/auth/oauth/consent-code.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import {
  accessTokenFor,
  authorizeUrl,
  clientOfAgent,
  createFirstPartyClient,
  followAuthorize,
  pkcePair,
  postForm,
  authorizeInBrowser,
} from '../support/oauth.ts';
import { createAdmin, signIn, signUp, type TestUser } from '../support/users.ts';
import { meteredAgent, reqId, subscribe, usagePath, type MeteredAgent } from '../metering/support.ts';

/**
 * Contract revision 2, "Trust boundaries": every agent is a third party. Each test performs an attack over HTTP
 * that worked before the rule (issue 10, findings 2, 3 and 5) and shows it now fails and changes nothing.
 * docs/security.md names these tests next to the rules they hold.
 */

let t: TestApp;
let user: TestUser;
let admin: TestUser;
let x: MeteredAgent;
let y: MeteredAgent;
/** The user's token at agent X (X's own client). */
let tokenX: string;

beforeAll(async () => {
  t = await startTestApp({ now: '2026-03-10T12:00:00.000Z' });
  user = await signUp(t);
  admin = await createAdmin(t);
  x = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
  y = await meteredAgent(t.db, [
    { slug: 'calls', kind: 'rolling', quota: 10 },
    { slug: 'sites', kind: 'fixed', quota: 10 },
  ]);
  await subscribe(t, user.userId, x.tierId);
  await subscribe(t, user.userId, y.tierId);
  tokenX = (await accessTokenFor(t, user, { agentId: x.agentId })).accessToken;
});
afterAll(() => t.close());

const used = async (agentId: string, slug: string) =>
  (await t.http.get(usagePath(agentId, slug), { cookie: user.cookie })).body.data.used as number;

describe("a token acts only within its agent (finding 5)", () => {
  it("names its agent: aud is the agent's resource URL and client_id is that agent's client", async () => {
    const claims = decodeJwt(tokenX);
    const aud = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
    expect(aud).toContain(`${t.baseUrl}/agents/${x.agentId}`);
    expect(aud).not.toContain(t.baseUrl);
    expect(claims.client_id).toBe((await clientOfAgent(t, x.agentId)).clientId);
  });

  it("X's token cannot read, burn, decrement or cancel the user's subscription to Y; nothing changes", async () => {
    const before = { calls: await used(y.agentId, 'calls'), sites: await used(y.agentId, 'sites') };
    const attempts = [
      await t.http.get(usagePath(y.agentId), { bearer: tokenX }),
      await t.http.get(usagePath(y.agentId, 'calls'), { bearer: tokenX }),
      await t.http.post(usagePath(y.agentId, 'calls', 'increment'), { bearer: tokenX, json: { clientReqId: reqId(), amount: 5 } }),
      await t.http.post(usagePath(y.agentId, 'sites', 'decrement'), { bearer: tokenX, json: { amount: 1 } }),
      await t.http.get(`/me/subscriptions/${y.agentId}`, { bearer: tokenX }),
      await t.http.post(`/me/subscriptions/${y.agentId}/cancel`, { bearer: tokenX }),
    ];
    for (const res of attempts) {
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('FORBIDDEN');
    }
    expect({ calls: await used(y.agentId, 'calls'), sites: await used(y.agentId, 'sites') }).toEqual(before);
    const subscription = await t.http.get(`/me/subscriptions/${y.agentId}`, { cookie: user.cookie });
    expect(subscription.body.data).toMatchObject({ status: 'active', cancelAtPeriodEnd: false });
  });

  it("the same calls with X's token at X work (the boundary is the agent, not the token)", async () => {
    const res = await t.http.post(usagePath(x.agentId, 'calls', 'increment'), { bearer: tokenX, json: { clientReqId: reqId() } });
    expect(res.status).toBe(200);
    expect((await t.http.get(usagePath(x.agentId, 'calls'), { bearer: tokenX })).status).toBe(200);
  });

  it("catalog paths and actions naming Y answer 403 to X's token: reads, install, review, demo request", async () => {
    const slug = (await first<{ slug: string }>(t.db, sql`select slug from public.agents where id = ${y.agentId}`))!.slug;
    const attempts = [
      await t.http.get(`/agents/${y.agentId}`, { bearer: tokenX }),
      await t.http.get(`/agents/by-slug/${slug}`, { bearer: tokenX }),
      await t.http.get(`/agents/${y.agentId}/pricing`, { bearer: tokenX }),
      await t.http.post(`/agents/${y.agentId}/install`, { bearer: tokenX }),
      await t.http.put(`/agents/${y.agentId}/reviews`, { bearer: tokenX, json: { rating: 1, title: 'bad' } }),
      await t.http.post(`/agents/${y.agentId}/demo-requests`, { bearer: tokenX, json: {} }),
    ];
    for (const res of attempts) expect([res.status, res.body.error?.code]).toEqual([403, 'FORBIDDEN']);
    const installs = await first<{ n: number }>(t.db, sql`select count(*)::int as n from public.agent_installs where agent_id = ${y.agentId}`);
    expect(installs!.n).toBe(0);
    const reviews = await first<{ n: number }>(t.db, sql`select count(*)::int as n from public.reviews where agent_id = ${y.agentId}`);
    expect(reviews!.n).toBe(0);
    // X's own pages answer as usual
    expect((await t.http.get(`/agents/${x.agentId}`, { bearer: tokenX })).status).toBe(200);
  });

  it("attack: X's token cannot learn which unpublished agents exist: their slugs answer 404, as an unknown slug does", async () => {
    // The boundary resolved every agent's slug, so a draft's slug answered 403 (another agent) and an unknown one
    // 404: any agent backend could enumerate the marketplace's unannounced agents by guessing.
    await sql`insert into public.agents (slug, name, status) values ('stealth-launch-draft', 'Stealth', 'draft'),
                                                                    ('retired-agent-x', 'Retired', 'inactive')`.execute(t.db);
    for (const slug of ['stealth-launch-draft', 'retired-agent-x', 'no-such-agent-anywhere']) {
      const res = await t.http.get(`/agents/by-slug/${slug}`, { bearer: tokenX });
      expect([slug, res.status, res.body.error?.code]).toEqual([slug, 404, 'NOT_FOUND']);
    }
    // a published agent's slug is still another agent's: 403 (the test above), and the admin still sees the draft
    expect((await t.http.get('/agents/by-slug/stealth-launch-draft', { cookie: admin.cookie })).status).toBe(200);
  });

  it("GET /me/subscriptions with X's token lists only the subscription to X; GET /me shows id, email and name only", async () => {
    const mine = await t.http.get('/me/subscriptions', { bearer: tokenX });
    expect(mine.status).toBe(200);
    expect(mine.body.data.map((s: { agentId: string }) => s.agentId)).toEqual([x.agentId]);
    const all = await t.http.get('/me/subscriptions', { cookie: user.cookie });
    expect(all.body.data.map((s: { agentId: string }) => s.agentId).sort()).toEqual([x.agentId, y.agentId].sort());
    const me = await t.http.get('/me', { bearer: tokenX });
    expect(me.body.data).toEqual({ id: user.userId, email: user.email, name: expect.any(String) });
  });

  it("checkout of Y's tier and Y's billing portal answer 403 to X's token", async () => {
    const checkout = await t.http.post('/me/checkout', { bearer: tokenX, json: { tierId: y.tierId } });
    expect([checkout.status, checkout.body.error?.code]).toEqual([403, 'FORBIDDEN']);
    const portal = await t.http.post('/me/billing-portal', { bearer: tokenX, json: { flow: 'cancel', agentId: y.agentId } });
    expect([portal.status, portal.body.error?.code]).toEqual([403, 'FORBIDDEN']);
    const overview = await t.http.post('/me/billing-portal', { bearer: tokenX, json: { flow: 'overview' } });
    expect([overview.status, overview.body.error?.code]).toEqual([403, 'FORBIDDEN']);
    expect(overview.body.error.message).toContain("opens only the portal's cancel flow of its own agent");
  });

  it("X's client cannot obtain a token whose audience is Y (RFC 8707 invalid_target)", async () => {
    const client = await clientOfAgent(t, x.agentId);
    const { verifier, challenge } = pkcePair();
    const { code } = await authorizeInBrowser(t, user, client, { challenge });
    const res = await postForm(t, '/api/auth/oauth2/token', client, {
      grant_type: 'authorization_code',
      code,
      redirect_uri: client.redirectUri,
      code_verifier: verifier,
      resource: `${t.baseUrl}/agents/${y.agentId}`,
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_target');
    for (const resource of [t.baseUrl]) {
      const again = await authorizeInBrowser(t, user, client, { challenge });
      const api = await postForm(t, '/api/auth/oauth2/token', client, {
        grant_type: 'authorization_code',
        code: again.code,
        redirect_uri: client.redirectUri,
        code_verifier: verifier,
        resource,
      });
      expect([api.status, api.body.error]).toEqual([400, 'invalid_target']);
    }
  });

  it("a token whose client was moved to another agent stops working at once (client -> agent checked in SQL)", async () => {
    const other = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    await subscribe(t, user.userId, other.tierId);
    const token = (await accessTokenFor(t, user, { agentId: other.agentId })).accessToken;
    expect((await t.http.get(usagePath(other.agentId, 'calls'), { bearer: token })).status).toBe(200);
    const client = await clientOfAgent(t, other.agentId);
    // the client now belongs to a third agent: the token's aud still names `other` (so the in-process check passes),
    // only the database knows. (Deleting the row would not test this rule: its trigger deletes the client and its tokens.)
    const third = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    await sql`update public.agent_oauth_clients set agent_id = ${third.agentId} where client_id = ${client.clientId}`.execute(t.db);
    const read = await t.http.get(usagePath(other.agentId, 'calls'), { bearer: token });
    expect([read.status, read.body.error?.code]).toEqual([401, 'UNAUTHORIZED']);
    const write = await t.http.post(usagePath(other.agentId, 'calls', 'increment'), { bearer: token, json: { clientReqId: reqId() } });
    expect([write.status, write.body.error?.code]).toEqual([401, 'UNAUTHORIZED']);
  });
});

describe("attack: X's token beside a made-up session cookie (found by a review)", () => {
  // The boundary read the credential by one rule (a request with a session cookie is the cookie's) and the routes by
  // another (a cookie that names no session fell back to the bearer token): the boundary saw no token and the route
  // acted as the user with X's token on Y: cancel, review, install.
  const decoy = () => `${user.cookie.split(';')[0]!.split('=')[0]!.trim()}=not-a-session`;

  it("reaches nothing of Y: the request is anonymous (401), and the user's subscription, Y's reviews and installs are untouched", async () => {
    const reads = [
      await t.http.get(`/me/subscriptions/${y.agentId}`, { bearer: tokenX, cookie: decoy() }),
      await t.http.get(usagePath(y.agentId), { bearer: tokenX, cookie: decoy() }),
    ];
    const writes = [
      await t.http.post(`/me/subscriptions/${y.agentId}/cancel`, { bearer: tokenX, cookie: decoy() }),
      await t.http.put(`/agents/${y.agentId}/reviews`, { bearer: tokenX, cookie: decoy(), json: { rating: 1, title: 'bad' } }),
      await t.http.post(`/agents/${y.agentId}/install`, { bearer: tokenX, cookie: decoy() }),
    ];
    expect((await t.http.get(`/me/subscriptions/${y.agentId}`, { cookie: user.cookie })).body.data.status).toBe('active');
    expect((await t.http.get(`/agents/${y.agentId}/reviews`)).body.data).toEqual([]);
    expect((await t.http.get(`/agents/${y.agentId}`)).body.data.installs).toBe(0);
    expect([...reads, ...writes].map((r) => [r.status, r.body.error?.code, r.body.error?.details?.reason])).toEqual(
      Array(5).fill([401, 'UNAUTHORIZED', 'stale_session_cookie']),
    );
    // and the same decoy beside X's token on X's own routes is no credential either
    expect((await t.http.get(`/me/subscriptions/${x.agentId}`, { bearer: tokenX, cookie: decoy() })).status).toBe(401);
  });

  it("a browser signed out elsewhere that still sends its cookie beside a good token: 401 that names the cookie, not invalid_token (the token is not thrown away)", async () => {
    const someone = await signUp(t);
    const stale = await signIn(t, { email: someone.email, password: someone.password });
    const other = await signIn(t, { email: someone.email, password: someone.password });
    const { accessToken } = await accessTokenFor(t, other, { agentId: x.agentId });
    expect((await t.http.post('/api/auth/revoke-other-sessions', { cookie: other.cookie, headers: { origin: t.baseUrl } })).status).toBe(200);
    const res = await t.http.get('/me', { bearer: accessToken, cookie: stale.cookie });
    expect([res.status, res.body.error?.details?.reason]).toEqual([401, 'stale_session_cookie']);
    expect(res.headers.get('www-authenticate')).not.toMatch(/invalid_token/);
    expect((await t.http.get('/me', { bearer: accessToken })).status).toBe(200);
    // a bad token alone is still invalid_token
    const bad = await t.http.get('/me', { bearer: 'not-a-token' });
    expect(bad.headers.get('www-authenticate')).toMatch(/error="invalid_token"/);
  });

  it('a cookie whose name only contains the session cookie\'s is not the session cookie: the token is judged, and stays within X', async () => {
    const lookalike = `x${decoy().split('=')[0]}=1`;
    const res = await t.http.post(`/agents/${y.agentId}/install`, { bearer: tokenX, cookie: lookalike });
    expect([res.status, res.body.error?.code]).toEqual([403, 'FORBIDDEN']);
    expect((await t.http.get(`/me/subscriptions/${x.agentId}`, { bearer: tokenX, cookie: lookalike })).status).toBe(200);
  });
});

describe('usage writes take only the agent backend\'s bearer token (finding 3)', () => {
  it('a user cannot erase their own usage with the cookie session: three rounds of 10 against a quota of 10', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'sites', kind: 'fixed', quota: 10 }]);
    const u = await signUp(t);
    await subscribe(t, u.userId, a.tierId);
    const token = (await accessTokenFor(t, u, { agentId: a.agentId })).accessToken;
    const path = (op: 'increment' | 'decrement') => usagePath(a.agentId, 'sites', op);
    expect((await t.http.post(path('increment'), { bearer: token, json: { clientReqId: reqId(), amount: 10 } })).status).toBe(200);
    for (let round = 0; round < 3; round++) {
      const erase = await t.http.post(path('decrement'), { cookie: u.cookie, json: { amount: 10 } });
      expect([erase.status, erase.body.error?.code]).toEqual([403, 'FORBIDDEN']);
      const more = await t.http.post(path('increment'), { cookie: u.cookie, json: { clientReqId: reqId(), amount: 10 } });
      expect([more.status, more.body.error?.code]).toEqual([403, 'FORBIDDEN']);
      const agentMore = await t.http.post(path('increment'), { bearer: token, json: { clientReqId: reqId(), amount: 10 } });
      expect(agentMore.status).toBe(429);
    }
    const usage = await t.http.get(usagePath(a.agentId, 'sites'), { cookie: u.cookie });
    expect(usage.body.data).toMatchObject({ used: 10, limit: 10, remaining: 0 });
  });

  it('a cookie sent with a bearer token still makes a usage write 403 (the cookie wins, and cannot write)', async () => {
    const res = await t.http.post(usagePath(x.agentId, 'calls', 'increment'), {
      cookie: user.cookie,
      bearer: tokenX,
      json: { clientReqId: reqId() },
    });
    expect([res.status, res.body.error?.code]).toEqual([403, 'FORBIDDEN']);
  });

  it('without credentials a usage write is 401, and reads keep the cookie', async () => {
    const res = await t.http.post(usagePath(x.agentId, 'calls', 'increment'), { json: { clientReqId: reqId() } });
    expect([res.status, res.body.error?.code]).toEqual([401, 'UNAUTHORIZED']);
    expect((await t.http.get(usagePath(x.agentId, 'calls'), { cookie: user.cookie })).status).toBe(200);
  });

  it('/openapi.json declares usage writes bearer-only', async () => {
    const doc = (await t.http.get('/openapi.json')).body;
    for (const op of ['increment', 'decrement']) {
      expect(doc.paths[`/me/usage/{agentId}/{metricSlug}/${op}`].post.security).toEqual([{ bearer: [] }]);
    }
  });
});

describe("an agent's token is never an admin credential (finding 2)", () => {
  let adminAtX: string;
  beforeAll(async () => {
    adminAtX = (await accessTokenFor(t, admin, { agentId: x.agentId })).accessToken;
  });

  it("a platform admin's token at an agent gets 403 on admin routes and catalog writes, and changes nothing", async () => {
    const roleBefore = (await first<{ role: string }>(t.db, sql`select role from "user" where id = ${user.userId}`))!.role;
    const clientOfY = await clientOfAgent(t, y.agentId);
    const secretBefore = (await first<{ s: string }>(t.db, sql`select "clientSecret" as s from "oauthClient" where "clientId" = ${clientOfY.clientId}`))!.s;
    const attempts = [
      await t.http.get('/admin/users', { bearer: adminAtX }),
      await t.http.put(`/admin/users/${user.userId}/role`, { bearer: adminAtX, json: { role: 'platform_admin' } }),
      await t.http.post(`/admin/agents/${y.agentId}/oauth-client/rotate-secret`, { bearer: adminAtX }),
      await t.http.post(`/admin/agents/${x.agentId}/oauth-client/rotate-secret`, { bearer: adminAtX }),
      await t.http.post('/agents', {
        bearer: adminAtX,
        json: { slug: 'evil-agent', name: 'Evil', description: 'x', redirectUris: ['https://evil.example/cb'] },
      }),
      await t.http.patch(`/agents/${x.agentId}`, { bearer: adminAtX, json: { name: 'Renamed' } }),
      await t.http.get('/admin/interactions', { bearer: adminAtX }),
    ];
    for (const res of attempts) expect([res.status, res.body.error?.code]).toEqual([403, 'FORBIDDEN']);
    expect((await first<{ role: string }>(t.db, sql`select role from "user" where id = ${user.userId}`))!.role).toBe(roleBefore);
    expect((await first<{ s: string }>(t.db, sql`select "clientSecret" as s from "oauthClient" where "clientId" = ${clientOfY.clientId}`))!.s).toBe(secretBefore);
    expect(await first(t.db, sql`select 1 from public.agents where slug = 'evil-agent'`)).toBeUndefined();
  });

  it("an agent's client cannot ask for the admin scope", async () => {
    const client = await clientOfAgent(t, x.agentId);
    const { challenge } = pkcePair();
    const landing = await followAuthorize(t, authorizeUrl(client, { challenge, scope: 'openid admin' }), admin.cookie);
    expect(landing.searchParams.get('error')).toBe('invalid_scope');
    expect(landing.searchParams.get('code')).toBeNull();
  });

  it('the first-party client gives a platform admin an admin token (aud: the API); an ordinary user cannot get one', async () => {
    const client = await createFirstPartyClient(t);
    const tokens = await accessTokenFor(t, admin, { client, scope: 'openid offline_access admin' });
    expect(decodeJwt(tokens.accessToken).aud).toContain(t.baseUrl);
    expect((await t.http.get('/admin/users', { bearer: tokens.accessToken })).status).toBe(200);

    const { challenge } = pkcePair();
    const denied = await followAuthorize(t, authorizeUrl(client, { challenge, scope: 'openid admin', state: 's1' }), user.cookie);
    expect(`${denied.origin}${denied.pathname}`).toBe(client.redirectUri);
    expect(denied.searchParams.get('error')).toBe('access_denied');
    expect(denied.searchParams.get('state')).toBe('s1');
    expect(denied.searchParams.get('iss')).toBe(`${t.baseUrl}/api/auth`); // RFC 9207, as discovery announces
    expect(denied.searchParams.get('code')).toBeNull();
  });

  it('attack: an ordinary user who signs in with the signed authorization query still gets no admin-scope token', async () => {
    // The authorize wrapper refuses the admin scope to a signed-in non-admin, but a signed-out request goes on to
    // sign-in, and a sign-in carrying the library's signed query continues to consent without passing the wrapper.
    const client = await createFirstPartyClient(t);
    const { verifier, challenge } = pkcePair();
    const toSignIn = await followAuthorize(t, authorizeUrl(client, { challenge, scope: 'openid admin', state: 's2' }));
    const signedIn = await t.http.post('/api/auth/sign-in/email', {
      headers: { origin: t.baseUrl },
      json: { email: user.email, password: user.password, oauth_query: toSignIn.search.slice(1) },
    });
    const toConsent = new URL(signedIn.body.url);
    expect(toConsent.searchParams.get('scope')).toBe('openid admin');
    const cookie = signedIn.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
    const consent = await t.http.post('/api/auth/oauth2/consent', {
      cookie,
      headers: { origin: t.baseUrl },
      json: { accept: true, consent_code: encodeConsentCode(toConsent.search.slice(1)) },
    });
    const code = new URL(consent.body.url).searchParams.get('code');
    expect(code).toBeTruthy();
    const exchanged = await postForm(t, '/api/auth/oauth2/token', client, {
      grant_type: 'authorization_code', code: code!, redirect_uri: client.redirectUri, code_verifier: verifier,
    });
    expect({ status: exchanged.status, error: exchanged.body.error }).toEqual({ status: 400, error: 'invalid_grant' });
  });

  it('an admin token stops being one when its user is demoted', async () => {
    const other = await createAdmin(t);
    const client = await createFirstPartyClient(t);
    const { accessToken, refreshToken } = await accessTokenFor(t, other, { client, scope: 'openid offline_access admin' });
    expect((await t.http.get('/admin/users', { bearer: accessToken })).status).toBe(200);
    await sql`update "user" set role = 'user' where id = ${other.userId}`.execute(t.db);
    const res = await t.http.get('/admin/users', { bearer: accessToken });
    expect([res.status, res.body.error?.code]).toEqual([403, 'FORBIDDEN']);
    // and its refresh ends the grant: the token endpoint mints the admin scope only for a platform admin
    const refreshed = await postForm(t, '/api/auth/oauth2/token', client, { grant_type: 'refresh_token', refresh_token: refreshToken });
    expect({ status: refreshed.status, error: refreshed.body.error }).toEqual({ status: 400, error: 'invalid_grant' });
  });
});
