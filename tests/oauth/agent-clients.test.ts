import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { provisionAgentClient } from '../../functions/auth/agent-clients.ts';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertAgent } from '../support/fixtures.ts';
import { accessTokenFor, authorizeUrl, createOAuthClient, followAuthorize, pkcePair, postForm, type TestOAuthClient } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * Agent OAuth clients: provisioning inside the caller's transaction, and the admin endpoints that read a
 * client (never its secret), replace its URIs and rotate its secret.
 */

let t: TestApp;
let admin: TestUser;
let member: TestUser;
let agent: TestOAuthClient;

beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  member = await signUp(t);
  agent = await createOAuthClient(t, {
    redirectUris: ['https://agent.example/cb', 'http://127.0.0.1:9/callback'],
    postLogoutRedirectUris: ['https://agent.example/bye'],
  });
});
afterAll(async () => {
  await t?.close();
});

const adminCall = (method: 'get' | 'patch' | 'post', path: string, json?: unknown) =>
  t.http[method](path, { cookie: admin.cookie, headers: { origin: t.baseUrl }, ...(json !== undefined ? { json } : {}) });

describe('provisionAgentClient', () => {
  test('creates nothing when the surrounding transaction rolls back', async () => {
    const row = await insertAgent(t.db);
    let clientId = '';
    await expect(
      t.db.transaction().execute(async (trx) => {
        clientId = (await provisionAgentClient(t.deps, trx, { agentId: row.id, name: 'x', redirectUris: ['https://a.example/cb'] })).clientId;
        throw new Error('createAgent failed later');
      }),
    ).rejects.toThrow('createAgent failed later');
    expect(clientId).not.toBe('');
    expect(await first(t.db, sql`select 1 from "oauthClient" where "clientId" = ${clientId}`)).toBeUndefined();
    expect((await adminCall('get', `/admin/agents/${row.id}/oauth-client`)).status).toBe(404);
  });

  test('stores the URI lists and scopes as JSON arrays (the library reads them as arrays on both drivers)', async () => {
    const row = await insertAgent(t.db);
    const { clientId } = await t.db
      .transaction()
      .execute((trx) => provisionAgentClient(t.deps, trx, { agentId: row.id, name: 'x', redirectUris: ['https://a.example/cb'], postLogoutRedirectUris: ['https://a.example/bye'] }));
    expect((await adminCall('patch', `/admin/agents/${row.id}/oauth-client`, { redirectUris: ['https://b.example/cb'] })).status).toBe(200);
    const types = await first<Record<string, string>>(
      t.db,
      sql`select jsonb_typeof("redirectUris") as r, jsonb_typeof("postLogoutRedirectUris") as p, jsonb_typeof("scopes") as s
            from "oauthClient" where "clientId" = ${clientId}`,
    );
    expect(types).toEqual({ r: 'array', p: 'array', s: 'array' });
  });

  test('accepts https and loopback http, refuses everything else with the field path', async () => {
    const row = await insertAgent(t.db);
    const attempt = (redirectUris: string[], postLogoutRedirectUris: string[] = []) =>
      t.db.transaction().execute((trx) => provisionAgentClient(t.deps, trx, { agentId: row.id, name: 'x', redirectUris, postLogoutRedirectUris }));
    const refused: Array<[string[], string[], string]> = [
      [[], [], 'redirectUris'],
      [['http://localhost:3000/cb'], [], 'redirectUris.0'],
      [['https://ok.example/cb', 'http://agent.example/cb'], [], 'redirectUris.1'],
      [['https://ok.example/cb#frag'], [], 'redirectUris.0'],
      [['https://user:pw@ok.example/cb'], [], 'redirectUris.0'],
      [['com.example.app:/cb'], [], 'redirectUris.0'],
      [['not a url'], [], 'redirectUris.0'],
      [['https://ok.example/cb'], ['ftp://ok.example/bye'], 'postLogoutRedirectUris.0'],
    ];
    for (const [uris, logout, path] of refused) {
      const error = await attempt(uris, logout).catch((e) => e);
      expect(error.code, JSON.stringify(uris)).toBe('VALIDATION_ERROR');
      expect(error.details.issues.map((i: { path: string }) => i.path)).toContain(path);
    }
    const created = await attempt(['https://ok.example/cb', 'http://127.0.0.1:8123/cb', 'http://[::1]:8123/cb'], ['https://ok.example/bye']);
    expect(created.clientId).toBeTruthy();
    expect(created.clientSecret.length).toBeGreaterThanOrEqual(40);
    // One client per agent.
    expect((await attempt(['https://ok.example/cb']).catch((e) => e)).code).toBe('CONFLICT');
  });

  test('stores only a hash of the secret: SHA-256, base64url, the form the auth library checks it against', async () => {
    const row = await first<{ clientSecret: string }>(t.db, sql`select "clientSecret" from "oauthClient" where "clientId" = ${agent.clientId}`);
    expect(row!.clientSecret).toBe(createHash('sha256').update(agent.clientSecret).digest('base64url'));
    expect(row!.clientSecret).not.toContain(agent.clientSecret);
  });
});

describe('getAgentClient', () => {
  test('an admin reads the client, never its secret', async () => {
    const res = await adminCall('get', `/admin/agents/${agent.agentId}/oauth-client`);
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({
      clientId: agent.clientId,
      redirectUris: ['https://agent.example/cb', 'http://127.0.0.1:9/callback'],
      postLogoutRedirectUris: ['https://agent.example/bye'],
      createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT.*Z$/),
    });
    expect(res.text).not.toContain(agent.clientSecret);
    expect(res.text).not.toMatch(/secret/i);
  });

  test('401 anonymous, 403 for a non-admin (bearer too), 404 unknown agent, 400 malformed id', async () => {
    const path = `/admin/agents/${agent.agentId}/oauth-client`;
    const anonymous = await t.http.get(path);
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.error.details.signInUrl).toBeTruthy();
    expect((await t.http.get(path, { cookie: member.cookie })).status).toBe(403);
    expect((await adminCall('get', '/admin/agents/00000000-0000-4000-8000-000000000000/oauth-client')).status).toBe(404);
    const malformed = await adminCall('get', '/admin/agents/not-a-uuid/oauth-client');
    expect(malformed.status).toBe(400);
    expect(malformed.body.error.code).toBe('VALIDATION_ERROR');
  });
});

describe('updateAgentClient', () => {
  test('replaces the given lists; the new URIs are what authorize accepts', async () => {
    const client = await createOAuthClient(t, { redirectUris: ['https://old.example/cb'] });
    const res = await adminCall('patch', `/admin/agents/${client.agentId}/oauth-client`, { redirectUris: ['https://new.example/cb'] });
    expect(res.status).toBe(200);
    expect(res.body.data.redirectUris).toEqual(['https://new.example/cb']);
    expect(res.body.data.postLogoutRedirectUris).toEqual(['http://127.0.0.1:9/signed-out']);

    const { challenge } = pkcePair();
    const old = await followAuthorize(t, authorizeUrl({ ...client, redirectUri: 'https://old.example/cb' }, { challenge }), member.cookie);
    expect(old.origin).toBe(t.baseUrl);
    expect(old.searchParams.get('error')).toBe('invalid_redirect');
    const fresh = await followAuthorize(t, authorizeUrl({ ...client, redirectUri: 'https://new.example/cb' }, { challenge }), member.cookie);
    expect(fresh.pathname).toBe('/consent');

    const logout = await adminCall('patch', `/admin/agents/${client.agentId}/oauth-client`, { postLogoutRedirectUris: [] });
    expect(logout.body.data).toMatchObject({ redirectUris: ['https://new.example/cb'], postLogoutRedirectUris: [] });
  });

  test('bad URIs are a 400 naming the field, and change nothing', async () => {
    const path = `/admin/agents/${agent.agentId}/oauth-client`;
    for (const body of [{ redirectUris: [] }, { redirectUris: ['http://localhost/cb'] }, { postLogoutRedirectUris: ['javascript:alert(1)'] }, { redirectUris: 'https://x.example' }]) {
      const res = await adminCall('patch', path, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe('VALIDATION_ERROR');
      expect(res.body.error.details.issues.length).toBeGreaterThan(0);
    }
    expect((await adminCall('get', path)).body.data.redirectUris).toEqual(['https://agent.example/cb', 'http://127.0.0.1:9/callback']);
  });

  test('a URI is stored only in the spelling it parses to, the one codes are sent to (review 23)', async () => {
    // `https://x.example/\u0001` sent codes to https://x.example/, `\\path` to //path, a tab could never match
    const path = `/admin/agents/${agent.agentId}/oauth-client`;
    for (const uri of ['https://x.example/\u0001', 'https://x.example/a b', 'https://x.example/\\path', 'https://x.example/\t', 'https://X.example/cb', 'https://x.example']) {
      const res = await adminCall('patch', path, { redirectUris: [uri] });
      expect([uri, res.status, res.body.error?.code]).toEqual([uri, 400, 'VALIDATION_ERROR']);
      expect(res.body.error.details.issues[0].message).toContain(`must be written as the URL it parses to: ${new URL(uri).href}`);
      const logout = await adminCall('patch', path, { postLogoutRedirectUris: [uri] });
      expect([uri, logout.status]).toEqual([uri, 400]);
    }
    expect((await adminCall('get', path)).body.data.redirectUris).toEqual(['https://agent.example/cb', 'http://127.0.0.1:9/callback']);
  });

  test('access control and unknown agents', async () => {
    const path = `/admin/agents/${agent.agentId}/oauth-client`;
    expect((await t.http.patch(path, { json: { redirectUris: ['https://x.example/cb'] } })).status).toBe(401);
    expect((await t.http.patch(path, { cookie: member.cookie, headers: { origin: t.baseUrl }, json: { redirectUris: ['https://x.example/cb'] } })).status).toBe(403);
    expect((await adminCall('patch', '/admin/agents/00000000-0000-4000-8000-000000000000/oauth-client', { redirectUris: ['https://x.example/cb'] })).status).toBe(404);
    const notJson = await t.http.patch(path, { cookie: admin.cookie, headers: { origin: t.baseUrl, 'content-type': 'text/plain' }, body: 'x' });
    expect(notJson.status).toBe(415);
  });
});

describe('rotateAgentClientSecret', () => {
  test('the new secret works at once and the old one stops working', async () => {
    const client = await createOAuthClient(t);
    const res = await adminCall('post', `/admin/agents/${client.agentId}/oauth-client/rotate-secret`);
    expect(res.status).toBe(200);
    expect(res.body.data.clientId).toBe(client.clientId);
    const secret = res.body.data.clientSecret as string;
    expect(secret).not.toBe(client.clientSecret);

    // Client authentication is checked by introspection without needing a user flow.
    const probe = (clientSecret: string) => postForm(t, '/api/auth/oauth2/introspect', { clientId: client.clientId, clientSecret }, { token: 'x' });
    expect((await probe(client.clientSecret)).status).toBe(401);
    const ok = await probe(secret);
    expect(ok.status).toBe(200);
    expect(ok.body.active).toBe(false);
    // Shown once: reading the client again does not reveal it.
    expect((await adminCall('get', `/admin/agents/${client.agentId}/oauth-client`)).text).not.toContain(secret);
  });

  test('access control and unknown agents', async () => {
    const path = `/admin/agents/${agent.agentId}/oauth-client/rotate-secret`;
    expect((await t.http.post(path)).status).toBe(401);
    expect((await t.http.post(path, { cookie: member.cookie, headers: { origin: t.baseUrl } })).status).toBe(403);
    expect((await adminCall('post', '/admin/agents/00000000-0000-4000-8000-000000000000/oauth-client/rotate-secret')).status).toBe(404);
    // Nothing rotated by the refused calls.
    expect((await postForm(t, '/api/auth/oauth2/introspect', agent, { token: 'x' })).status).toBe(200);
  });
});

describe("the client follows the agent's life", () => {
  test('a deactivated agent cannot be authorized or refresh, and its live tokens stop; reactivation restores refresh', async () => {
    const client = await createOAuthClient(t);
    const tokens = await accessTokenFor(t, member, { client });
    expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(200);

    await sql`update public.agents set status = 'inactive' where id = ${client.agentId}`.execute(t.db);
    expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(401);
    const refresh = () => postForm(t, '/api/auth/oauth2/token', client, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken });
    expect((await refresh()).status).toBe(401);
    const { challenge } = pkcePair();
    const landing = await followAuthorize(t, authorizeUrl(client, { challenge }), member.cookie);
    expect(landing.origin).toBe(t.baseUrl);
    expect(landing.searchParams.get('error')).toBe('client_disabled');

    await sql`update public.agents set status = 'active' where id = ${client.agentId}`.execute(t.db);
    const again = await refresh();
    expect(again.status).toBe(200);
    expect((await t.http.get('/me', { bearer: again.body.access_token })).status).toBe(200);
    // The token revoked at deactivation stays revoked.
    expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(401);
  });

  test('removing the agent removes its client and ends its tokens', async () => {
    const client = await createOAuthClient(t);
    const tokens = await accessTokenFor(t, member, { client });
    await sql`delete from public.agents where id = ${client.agentId}`.execute(t.db);
    expect(await first(t.db, sql`select 1 from "oauthClient" where "clientId" = ${client.clientId}`)).toBeUndefined();
    expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(401);
  });
});
