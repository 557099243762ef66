import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { testTier } from '../support/databases.ts';
import { accessTokenFor } from '../support/oauth.ts';
import { createAdmin, signIn, signUp, type TestUser } from '../support/users.ts';

/**
 * "A 500 on any client input is a bug": every operation in /openapi.json, called by an admin, an ordinary user
 * and an anonymous caller with malformed path ids, odd query strings and bodies of the wrong shape, must answer
 * a 4xx (or 501/503 where the contract says so) in the envelope, never a 5xx failure of ours.
 *
 * The two walks (thousands of calls each, the suite's largest file) share their operations and routes out between the
 * two databases: each tier walks every other one, so a run of the suite makes every call once, on one engine or the
 * other (both run the same SQL; walked whole on both they cost CI about 50 s).
 */
const myShare = <T>(items: T[]): T[] => items.filter((_, i) => i % 2 === (testTier() === 'postgres' ? 0 : 1));

let t: TestApp;
let admin: TestUser;
let user: TestUser;

beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  user = await signUp(t);
});
afterAll(() => t?.close());

interface Operation {
  method: string;
  path: string;
  operationId: string;
}

async function operations(): Promise<Operation[]> {
  const doc = (await t.http.get('/openapi.json')).body as { paths: Record<string, Record<string, { operationId?: string }>> };
  const out: Operation[] = [];
  for (const [path, methods] of Object.entries(doc.paths)) {
    // The auth library's operations (sign-out, revoke-sessions, delete-user, ...) end the callers' sessions: the
    // route walk below covers them, signing the callers in again as it goes.
    if (path.startsWith('/api/auth/')) continue;
    for (const [method, op] of Object.entries(methods)) {
      if (!['get', 'post', 'put', 'patch', 'delete'].includes(method)) continue;
      out.push({ method: method.toUpperCase(), path, operationId: op.operationId ?? `${method} ${path}` });
    }
  }
  return out;
}

const pathValues = ['00000000-0000-4000-8000-000000000000', 'not-a-uuid', 'a%00b', 'x'.repeat(300), '%F0%9F%98%80', "'%3B--"];
const bodies: unknown[] = [{}, [], 'text', 42, null, { id: 1, name: ['x'], slug: {}, tierId: 'nope', amount: -1, limit: 1e309 }];
const allowed5xx = new Set([501, 503]);

function fill(path: string, value: string): string {
  return path.replace(/\{[^}]+\}/g, value);
}

describe('no client input produces a 5xx', () => {
  it('holds for every documented operation with malformed ids and bodies, for each kind of caller', async () => {
    const ops = await operations();
    expect(ops.length).toBeGreaterThan(50);
    const failures: string[] = [];
    const callers: Array<[string, { cookie?: string; headers?: Record<string, string> }]> = [
      ['admin', { cookie: admin.cookie, headers: { origin: t.baseUrl } }],
      ['user', { cookie: user.cookie, headers: { origin: t.baseUrl } }],
      ['anonymous', {}],
    ];
    for (const op of myShare(ops)) {
      if (op.path.startsWith('/webhooks/')) continue; // signature-checked raw body, covered by the billing tests
      for (const [who, auth] of callers) {
        // One caller's malformed calls of one operation at once (up to 36): one after another they took 40-50 s a tier.
        const calls = pathValues.flatMap((value) => {
          const url = `${fill(op.path, value)}?limit=abc&cursor=%%%&from=yesterday&q=${'z'.repeat(50)}`;
          const requests = op.method === 'GET' || op.method === 'DELETE' ? [undefined] : bodies;
          return requests.map((json) => ({ url, json }));
        });
        await Promise.all(
          calls.map(async ({ url, json }) => {
            const res = await t.http.call(op.method, url, { ...auth, ...(json !== undefined ? { json } : {}) });
            if (res.status >= 500 && !allowed5xx.has(res.status)) {
              failures.push(`${who} ${op.method} ${url} ${JSON.stringify(json)} -> ${res.status} ${res.text.slice(0, 200)}`);
            }
          }),
        );
      }
    }
    expect(failures).toEqual([]);
  }, 240_000);

  it('holds for arbitrary JSON bodies on the write operations (property-based)', async () => {
    const writes = (await operations()).filter((o) => o.method !== 'GET' && o.method !== 'DELETE' && !o.path.startsWith('/webhooks/'));
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...writes), fc.jsonValue(), async (op, body) => {
        const res = await t.http.call(op.method, fill(op.path, '00000000-0000-4000-8000-000000000000'), {
          cookie: admin.cookie,
          headers: { origin: t.baseUrl },
          json: body,
        });
        expect(res.status < 500 || allowed5xx.has(res.status), `${op.method} ${op.path} ${JSON.stringify(body)} -> ${res.status} ${res.text}`).toBe(true);
      }),
      { numRuns: 150 },
    );
  }, 240_000);
});

/**
 * Every route the app actually mounts, not only those /openapi.json documents: Hono's route table (our routes,
 * the built-in pages, /files, /internal, /webhooks) and every endpoint of the auth library under /api/auth (its
 * `api` object: sessions, admin, organizations, OAuth client management, consents, ...), each called with
 * malformed path values (and, except for the admin, the real agent's id) and bodies by an anonymous caller, a user,
 * another user, an admin, the user's bearer token of the agent and the same user's token of another agent.
 */
describe('no client input produces a 5xx on any mounted route', () => {
  interface Route {
    method: string;
    path: string;
  }

  function mountedRoutes(): Route[] {
    const routes = new Map<string, Route>();
    const add = (method: string, path: string) => {
      const methods = method === 'ALL' ? ['GET', 'POST'] : [method.toUpperCase()];
      for (const m of methods) routes.set(`${m} ${path}`, { method: m, path });
    };
    for (const r of t.app.routes as Array<{ method: string; path: string }>) {
      if (r.path === '/*') continue; // the middleware every request passes anyway
      add(r.method, r.path);
    }
    const api = (t.deps as unknown as { auth: { api: Record<string, { path?: unknown; options?: { method?: string | string[] } }> } }).auth.api;
    for (const endpoint of Object.values(api)) {
      if (typeof endpoint?.path !== 'string') continue; // server-side helpers without a route
      const methods = endpoint.options?.method ?? 'GET';
      for (const m of Array.isArray(methods) ? methods : [methods]) add(m === '*' ? 'ALL' : m, `/api/auth${endpoint.path}`);
    }
    return [...routes.values()];
  }

  /** Hono `:param` and `*` placeholders filled with one malformed value. */
  const fillRoute = (path: string, value: string) => path.replace(/:[A-Za-z_]+/g, value).replace(/\*/g, `${value}/x`);

  it('holds for every route of the app and of the auth library, for anonymous, a user, another user, admin, and bearer tokens of the agent and of another agent', async () => {
    const routes = mountedRoutes();
    const paths = new Set(routes.map((r) => r.path));
    expect(routes.length).toBeGreaterThan(200);
    // the route table covers more than the document: the auth library's own endpoints and the non-API routes
    for (const path of ['/api/auth/oauth2/create-client', '/api/auth/admin/update-user', '/api/auth/organization/create', '/api/auth/oauth2/get-consents', '/files/*', '/sign-in'])
      expect(paths, path).toContain(path);

    const agent = await t.http.post('/agents', {
      cookie: admin.cookie,
      json: { slug: 'fuzz-agent', name: 'Fuzz', description: 'fuzz', status: 'active', redirectUris: ['http://127.0.0.1:9/callback'] },
    });
    expect(agent.status, agent.text).toBe(201);
    const people: Record<'user' | 'otherUser' | 'admin', TestUser> = { user: await signUp(t), otherUser: await signUp(t), admin: await createAdmin(t) };
    // the same user's token of another agent, sent to routes that name the first agent
    const other = await t.http.post('/agents', {
      cookie: admin.cookie,
      json: { slug: 'fuzz-agent-2', name: 'Fuzz 2', description: 'fuzz', status: 'active', redirectUris: ['http://127.0.0.1:9/callback'] },
    });
    expect(other.status, other.text).toBe(201);

    /** A route may end the caller's session (sign-out, revoke-sessions, delete-user): sign in again, or anew. */
    const stillSignedIn = async (who: 'user' | 'otherUser' | 'admin') => {
      const session = await t.http.get('/api/auth/get-session', { cookie: people[who].cookie });
      if (session.body?.user) return;
      people[who] = await signIn(t, people[who]).catch(() => (who === 'admin' ? createAdmin(t) : signUp(t)));
    };
    /** The user's bearer token of an agent, minted again when a route ended it (or the session behind it). */
    const tokens = new Map<string, string>();
    const bearerOf = async (agentId: string) => {
      const token = tokens.get(agentId);
      if (token && (await t.http.get('/me', { bearer: token })).status === 200) return token;
      await stillSignedIn('user');
      const fresh = (await accessTokenFor(t, people.user, { agentId })).accessToken;
      tokens.set(agentId, fresh);
      return fresh;
    };

    // a fresh id, a malformed one, and (for every caller but the admin, who could archive it mid-walk) the real agent's
    const junkValues = ['00000000-0000-4000-8000-000000000000', 'not-a-uuid%00'];
    const realAgentId = agent.body.data.id as string;
    const junkBodies: unknown[] = [{}, { id: 1, userId: ['x'], email: {}, token: null, client_id: 7, redirect_uris: 'x', amount: -1 }];
    const failures: string[] = [];
    for (const route of myShare(routes)) {
      for (const who of ['anonymous', 'user', 'otherUser', 'admin', 'bearer', 'otherAgentBearer'] as const) {
        let auth: { bearer?: string; cookie?: string; headers?: Record<string, string> } = {};
        if (who === 'bearer' || who === 'otherAgentBearer') {
          auth = { bearer: await bearerOf(who === 'bearer' ? realAgentId : other.body.data.id) };
        } else if (who !== 'anonymous') {
          await stillSignedIn(who);
          auth = { cookie: people[who].cookie, headers: { origin: t.baseUrl } };
        }
        const values = who === 'admin' || !/:[A-Za-z_]+/.test(route.path) ? junkValues : [...junkValues, realAgentId];
        // This caller's calls of this route at once (up to 6); the next caller is signed in again first if they ended it.
        const calls = values.flatMap((value) => {
          const url = `${fillRoute(route.path, value)}?id=${value}&token=%%%&client_id=&limit=abc&cursor=%FF`;
          const bodies = route.method === 'GET' || route.method === 'DELETE' ? [undefined] : junkBodies;
          return bodies.map((json) => ({ url, json }));
        });
        await Promise.all(
          calls.map(async ({ url, json }) => {
            const res = await t.http.call(route.method, url, { ...auth, ...(json !== undefined ? { json } : {}) });
            if (res.status >= 500 && !allowed5xx.has(res.status)) {
              failures.push(`${who} ${route.method} ${url} ${JSON.stringify(json)} -> ${res.status} ${res.text.slice(0, 200)}`);
            }
          }),
        );
      }
    }
    expect(failures).toEqual([]);
  }, 300_000);
});
