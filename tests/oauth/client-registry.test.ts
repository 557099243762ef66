import { createRemoteJWKSet, jwtVerify } from 'jose';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { closedEndpointOf, PUBLIC_CLIENT_ENDPOINTS } from '../../functions/auth/oauth/closed-endpoints.ts';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, type TestOAuthClient } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * The OAuth client registry is closed (contract.md, Trust boundaries; issue 10 findings 1 and 11): clients exist only
 * as agents' clients, made by createAgent and managed through /admin/agents/{agentId}/oauth-client. Every client,
 * resource and registration endpoint of the auth library, and the jwt plugin's session-JWT endpoint, is walked here
 * as anonymous, an ordinary user, a platform admin and an agent backend (bearer), with bodies that would succeed on
 * an open registry (today's library default lets any signed-in user create a client). The list is read from the
 * library's own endpoint table at run time, so an endpoint a library upgrade adds is walked too.
 */

let t: TestApp;
let user: TestUser;
let admin: TestUser;
let agentBearer: string;
let agent: TestOAuthClient & { name: string };

const ATTACKER_URI = 'https://evil.example/cb';

interface LibraryEndpoint {
  name: string;
  path: string;
  methods: string[];
}

/** Every endpoint of the library's table whose path is about clients, resources or registration, or is /token. */
function registryEndpoints(): LibraryEndpoint[] {
  const found: LibraryEndpoint[] = [];
  for (const [name, endpoint] of Object.entries(t.deps.auth.api as unknown as Record<string, unknown>)) {
    const { path, options } = (endpoint ?? {}) as { path?: unknown; options?: { method?: unknown } };
    if (typeof path !== 'string') continue;
    if (!/client|resource|register/i.test(path) && path !== '/token') continue;
    if (PUBLIC_CLIENT_ENDPOINTS.includes(path)) continue;
    const method = options?.method;
    const methods = (Array.isArray(method) ? method : [method]).filter((m): m is string => typeof m === 'string' && m !== '*');
    found.push({ name, path, methods: methods.length > 0 ? methods : ['GET', 'POST'] });
  }
  return found;
}

/** The path with its parameters filled in: an existing resource (the API's own) and the agent's real client. */
function concretePath(path: string): string {
  return path
    .replace(':identifier', encodeURIComponent(t.baseUrl))
    .replace(':client_id', encodeURIComponent(agent.clientId));
}

/** A body that would do harm on an open registry. */
function bodyFor(path: string): Record<string, unknown> {
  if (/create-client|register/.test(path)) {
    return {
      redirect_uris: [ATTACKER_URI],
      client_name: 'Support Copilot',
      token_endpoint_auth_method: 'client_secret_basic',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      scope: 'openid profile email offline_access',
    };
  }
  if (/update-client/.test(path)) {
    return { client_id: agent.clientId, update: { redirect_uris: [ATTACKER_URI], client_name: 'Support Copilot' } };
  }
  if (/resources$/.test(path)) return { identifier: 'https://evil.example/api', name: 'Evil API' };
  if (/resources\/:identifier$/.test(path)) return { name: 'Evil API', disabled: true };
  return { client_id: agent.clientId };
}

/** What the registry holds: row counts, and the agent's client as it is stored. */
async function registrySnapshot() {
  const counts = await first<Record<string, number>>(
    t.db,
    sql`select (select count(*)::int from "oauthClient") as clients,
               (select count(*)::int from "oauthResource") as resources,
               (select count(*)::int from "oauthClientResource") as links`,
  );
  const client = await first(
    t.db,
    sql`select "clientSecret", "name", "redirectUris"::text as "redirectUris", "disabled", "updatedAt"
          from "oauthClient" where "clientId" = ${agent.clientId}`,
  );
  return { counts, client };
}

beforeAll(async () => {
  t = await startTestApp();
  user = await signUp(t);
  admin = await createAdmin(t);
  // The agent and its client come from createAgent, the only way a client comes to exist.
  const name = 'Registry Agent';
  const created = await t.http.post('/agents', {
    cookie: admin.cookie,
    json: { slug: `registry-${Date.now()}`, name, description: 'An agent', status: 'active', redirectUris: ['https://agent.example.com/callback'] },
  });
  expect(created.status).toBe(201);
  agent = {
    agentId: created.body.data.id,
    clientId: created.body.data.oauthClient.clientId,
    clientSecret: created.body.data.oauthClient.clientSecret,
    redirectUri: 'https://agent.example.com/callback',
    postLogoutRedirectUri: '',
    name,
  };
  // An agent backend's bearer token (its own client), as the fourth kind of caller.
  agentBearer = (await accessTokenFor(t, await signUp(t), { client: agent })).accessToken;
});
afterAll(async () => {
  await t?.close();
});

describe('the library endpoint table', () => {
  test('lists client, resource and registration endpoints, and every one of them is closed by our router', () => {
    const endpoints = registryEndpoints();
    const paths = endpoints.map((e) => e.path);
    expect(paths).toEqual(expect.arrayContaining(['/oauth2/create-client', '/oauth2/register', '/oauth2/get-clients', '/token']));
    for (const path of paths) expect(closedEndpointOf(`/api/auth${path}`), path).toBeDefined();
    // The public metadata endpoint stays open.
    expect(closedEndpointOf('/api/auth/oauth2/public-client')).toBeUndefined();
  });
});

describe('over HTTP, every registry endpoint refuses everyone', () => {
  const callers = () =>
    [
      { who: 'anonymous', options: {}, status: 401, code: 'UNAUTHORIZED' },
      { who: 'user', options: { cookie: user.cookie, headers: { origin: t.baseUrl } }, status: 403, code: 'FORBIDDEN' },
      { who: 'platform admin', options: { cookie: admin.cookie, headers: { origin: t.baseUrl } }, status: 403, code: 'FORBIDDEN' },
      { who: 'agent backend', options: { bearer: agentBearer }, status: 403, code: 'FORBIDDEN' },
    ] as const;

  test('anonymous 401, signed in (platform admins included) 403, nothing written', async () => {
    const before = await registrySnapshot();
    const endpoints = registryEndpoints();
    expect(endpoints.length).toBeGreaterThan(0);
    let calls = 0;
    for (const endpoint of endpoints) {
      const path = `/api/auth${concretePath(endpoint.path)}`;
      for (const method of new Set([...endpoint.methods, 'GET', 'POST'])) {
        for (const caller of callers()) {
          const query = method === 'GET' ? `?client_id=${encodeURIComponent(agent.clientId)}` : '';
          const res = await t.http.call(method, `${path}${query}`, {
            ...caller.options,
            ...(method === 'GET' ? {} : { json: bodyFor(endpoint.path) }),
          });
          // Registration is 401 for everyone (contract.md, OAuth section).
          const expected = endpoint.path === '/oauth2/register' ? { status: 401, code: 'UNAUTHORIZED' } : caller;
          const label = `${caller.who} ${method} ${path}: ${res.status} ${res.text.slice(0, 200)}`;
          expect(res.status, label).toBe(expected.status);
          expect(res.body?.error?.code, label).toBe(expected.code);
          expect(res.text, label).not.toMatch(/client_secret|"token"/);
          calls++;
        }
      }
    }
    expect(calls).toBeGreaterThanOrEqual(endpoints.length * 4);
    expect(await registrySnapshot()).toEqual(before);
  });

  test('no other spelling of a closed path reaches the library', async () => {
    const before = await registrySnapshot();
    const spellings = [
      '/api/auth/oauth2/create-client/',
      '/api/auth//oauth2/create-client',
      '/api/auth/oauth2//create-client',
      '/api/auth/OAuth2/Create-Client',
      '/api/auth/oauth2/%63reate-client',
      '/api/auth/oauth2%2Fcreate-client',
      '/api/auth/oauth2/create-client?redirect_uris=x',
      '/api/auth/token/',
      '/api/auth/%74oken',
      `/api/auth/admin/oauth2/resources/${encodeURIComponent('https://evil.example/a/b')}/clients/${agent.clientId}`,
    ];
    for (const path of spellings) {
      const method = path.includes('token') ? 'GET' : 'POST';
      const res = await t.http.call(method, path, {
        cookie: user.cookie,
        headers: { origin: t.baseUrl },
        ...(method === 'POST' ? { json: bodyFor('/oauth2/create-client') } : {}),
      });
      expect(res.status, `${method} ${path}: ${res.text.slice(0, 200)}`).toBe(403);
    }
    expect(await registrySnapshot()).toEqual(before);
  });

  test('no session JWT comes with the session either', async () => {
    const session = await t.http.get('/api/auth/get-session', { cookie: user.cookie });
    expect(session.status).toBe(200);
    expect(session.body.user.id).toBe(user.userId);
    expect(session.headers.get('set-auth-jwt')).toBeNull();
  });
});

describe("the library's own privilege hooks refuse too (a route our router does not know yet stays closed)", () => {
  test('every registry endpoint called on the library directly, as a platform admin, is refused and writes nothing', async () => {
    const before = await registrySnapshot();
    const headers = new Headers({ cookie: admin.cookie, origin: t.baseUrl });
    const api = t.deps.auth.api as unknown as Record<string, (context: Record<string, unknown>) => Promise<unknown>>;
    // /token is the jwt plugin's (no privilege hook): the router is what closes it.
    const endpoints = registryEndpoints().filter((e) => e.path !== '/token');
    expect(endpoints.length).toBeGreaterThan(0);
    for (const endpoint of endpoints) {
      const method = endpoint.methods[0]!;
      const context: Record<string, unknown> = {
        headers,
        params: { identifier: t.baseUrl, client_id: agent.clientId },
        ...(method === 'GET' ? { query: { client_id: agent.clientId } } : { body: bodyFor(endpoint.path) }),
      };
      const outcome = await api[endpoint.name]!(context).then(
        (value) => ({ refused: false, value }),
        (error: { statusCode?: number; status?: unknown }) => ({ refused: true, statusCode: error.statusCode, status: error.status }),
      );
      expect(outcome, `${endpoint.name} ${endpoint.path}`).toMatchObject({ refused: true });
      // The privilege hooks answer 401; dynamic registration is off on its own (403).
      expect([401, 403], `${endpoint.name} ${endpoint.path}`).toContain((outcome as { statusCode?: number }).statusCode);
    }
    expect(await registrySnapshot()).toEqual(before);
  });
});

describe("the agent's client still works", () => {
  test('the code flow with the client createAgent made, its token verified against the JWKS', async () => {
    const someone = await signUp(t);
    const tokens = await accessTokenFor(t, someone, { client: agent });
    const me = await t.http.get('/me', { bearer: tokens.accessToken });
    expect(me.status).toBe(200);
    expect(me.body.data.id).toBe(someone.userId);

    const jwks = await t.http.get('/api/auth/jwks');
    expect(jwks.status).toBe(200);
    expect(jwks.body.keys.length).toBeGreaterThan(0);
    const { payload } = await jwtVerify(tokens.accessToken, createRemoteJWKSet(new URL(`${t.baseUrl}/api/auth/jwks`)), {
      issuer: `${t.baseUrl}/api/auth`,
      audience: `${t.baseUrl}/agents/${agent.agentId}`,
    });
    expect(payload).toMatchObject({ sub: someone.userId, client_id: agent.clientId });
  });

  test('the consent page can still read the public fields of the client', async () => {
    const res = await t.http.get(`/api/auth/oauth2/public-client?client_id=${encodeURIComponent(agent.clientId)}`, { cookie: user.cookie });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ client_id: agent.clientId, client_name: agent.name });
    expect(res.text).not.toMatch(/client_secret/);
    // Its pre-login twin is off (allowPublicClientPrelogin unset).
    const prelogin = await t.http.post('/api/auth/oauth2/public-client-prelogin', { json: { client_id: agent.clientId } });
    expect(prelogin.status).toBe(400);
  });

  test("names the agent as it is called now: a rename renames its client (review 82: the consent page showed the old name)", async () => {
    const renamed = `${agent.name} (renamed)`;
    const res = await t.http.patch(`/agents/${agent.agentId}`, { cookie: admin.cookie, json: { name: renamed } });
    expect(res.status, res.text).toBe(200);
    const read = await t.http.get(`/api/auth/oauth2/public-client?client_id=${encodeURIComponent(agent.clientId)}`, { cookie: user.cookie });
    expect(read.body.client_name).toBe(renamed);
    // a patch that leaves the name alone leaves the client's alone
    expect((await t.http.patch(`/agents/${agent.agentId}`, { cookie: admin.cookie, json: { description: 'Still the same agent' } })).status).toBe(200);
    expect((await t.http.get(`/api/auth/oauth2/public-client?client_id=${encodeURIComponent(agent.clientId)}`, { cookie: user.cookie })).body.client_name).toBe(renamed);
  });
});
