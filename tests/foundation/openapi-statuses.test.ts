import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { agentToken, meteredAgent, subscribe, type MeteredAgent } from '../metering/support.ts';

/**
 * "Every operation lists its error statuses" (docs/errors.md): a generated client (packages/client) has a type only
 * for the statuses /openapi.json lists. Every operation under the marketplace's own paths (not the auth library's
 * /api/auth/*) is called with otherwise valid parameters by the standard hostile callers that apply to it, and the
 * status each answer carries must be one the operation lists:
 *   - no credentials at all;
 *   - `Authorization: Bearer garbage`;
 *   - agent A's access token on a path that names agent B (an id or a slug);
 *   - a signed-in user's session cookie with a foreign `Origin` on a write;
 *   - a signed-in user's session cookie on a read another site's page sent (`Sec-Fetch-Site: cross-site`).
 * And by the requests a front end gets wrong (review 32), as a signed-in admin from a trusted origin, so that the
 * request reaches the route: a JSON body sent as text/plain (every operation taking JSON, the auth library's too), and a
 * malformed path or query value (an id that is not a UUID).
 */

type Json = Record<string, any>;

interface Operation {
  method: string;
  path: string;
  operationId: string;
  op: Json;
}

let t: TestApp;
let doc: Json;
let user: TestUser;
let admin: TestUser;
/** Agent A: its token is the hostile one. Agent B: the agent every path names. */
let a: MeteredAgent;
let b: MeteredAgent;
let bSlug: string;
let bSubscriptionId: string;
let tokenA: string;

beforeAll(async () => {
  // With DRAIN_TOKEN the /internal routes exist (without it they answer 404 to everyone).
  t = await startTestApp({ env: { DRAIN_TOKEN: 'drain-token-drain-token-drain-token-0123' } });
  admin = await createAdmin(t);
  user = await signUp(t, { verified: true });
  a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
  b = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
  bSlug = (await first<{ slug: string }>(t.db, sql`select slug from public.agents where id = ${b.agentId}`))!.slug;
  await subscribe(t, user.userId, a.tierId);
  bSubscriptionId = (await subscribe(t, user.userId, b.tierId)).id;
  tokenA = await agentToken(t, user, a.agentId);
  doc = (await t.http.get('/openapi.json')).body;
});
afterAll(() => t?.close());

const METHODS = ['get', 'post', 'put', 'patch', 'delete'];

function operations({ library = false } = {}): Operation[] {
  const out: Operation[] = [];
  for (const [path, item] of Object.entries<Json>(doc.paths)) {
    if (!library && path.startsWith('/api/auth/')) continue; // the auth library's own operations
    for (const [method, op] of Object.entries<Json>(item)) {
      if (!METHODS.includes(method)) continue;
      out.push({ method: method.toUpperCase(), path, operationId: op.operationId ?? `${method} ${path}`, op });
    }
  }
  return out;
}

function resolve(schema: Json): Json {
  let s = schema;
  while (s?.$ref) s = doc.components.schemas[s.$ref.replace('#/components/schemas/', '')];
  return s ?? {};
}

/** A minimal value the schema accepts: required properties only, the first enum value, the lower bounds. */
function sample(raw: Json, depth = 0): unknown {
  const schema = resolve(raw);
  if (depth > 8) return null;
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum)) return schema.enum[0];
  if (schema.default !== undefined) return schema.default;
  if (schema.example !== undefined) return schema.example;
  const options = schema.anyOf ?? schema.oneOf;
  if (options) return sample(options.find((o: Json) => resolve(o).type !== 'null') ?? options[0], depth + 1);
  if (schema.allOf) return Object.assign({}, ...schema.allOf.map((s: Json) => sample(s, depth + 1)));
  const type = Array.isArray(schema.type) ? schema.type.find((x: string) => x !== 'null') : schema.type;
  switch (type) {
    case 'object': {
      const out: Json = {};
      for (const name of schema.required ?? []) out[name] = sample(schema.properties?.[name] ?? {}, depth + 1);
      return out;
    }
    case 'array':
      return Array.from({ length: schema.minItems ?? 0 }, () => sample(schema.items ?? {}, depth + 1));
    case 'integer':
    case 'number':
      return schema.minimum ?? (schema.exclusiveMinimum !== undefined ? schema.exclusiveMinimum + 1 : 1);
    case 'boolean':
      return false;
    case 'string':
      switch (schema.format) {
        case 'uuid':
          return randomUUID();
        case 'email':
          return 'someone@example.com';
        case 'uri':
        case 'url':
          return 'https://example.com/x';
        case 'date-time':
          return new Date().toISOString();
        case 'date':
          return new Date().toISOString().slice(0, 10);
      }
      return 'x'.repeat(Math.max(schema.minLength ?? 1, 1));
    default:
      return {};
  }
}

/** A value the schema refuses (an id that is not a UUID, a value past its bounds), or undefined where it takes any text. */
function malformed(raw: Json): string | undefined {
  const schema = resolve(raw);
  if (schema.format === 'uuid') return 'not-a-uuid';
  if (Array.isArray(schema.enum)) return 'none-of-these';
  if (schema.pattern) return '!';
  if (schema.type === 'integer' || schema.type === 'number') return 'one';
  if (schema.maxLength !== undefined) return 'x'.repeat(schema.maxLength + 1);
  return undefined;
}

/** Path values that exist: agent B and its tier, metric and subscription; anything else a well-formed unknown. */
function pathValue(name: string, param: Json | undefined): string {
  const known: Record<string, string> = {
    agentId: b.agentId,
    slug: bSlug,
    tierId: b.tierId,
    metricSlug: 'calls',
    metricId: b.metrics.calls!,
    subscriptionId: bSubscriptionId,
    userId: user.userId,
  };
  return known[name] ?? String(sample(param?.schema ?? { type: 'string' }));
}

/** The operation's URL with valid path values and its required query parameters, and a valid JSON body. */
function request(op: Operation): { url: string; json?: unknown; body?: string } {
  const params: Json[] = op.op.parameters ?? [];
  const url = op.path.replace(/\{([^}]+)\}/g, (_, name: string) =>
    encodeURIComponent(pathValue(name, params.find((p) => p.in === 'path' && p.name === name))),
  );
  const query = new URLSearchParams();
  for (const p of params) if (p.in === 'query' && p.required) query.set(p.name, String(sample(p.schema ?? {})));
  const full = query.size ? `${url}?${query}` : url;
  const content = op.op.requestBody?.content;
  if (!content) return { url: full };
  if (content['application/json']) return { url: full, json: sample(content['application/json'].schema ?? {}) };
  return { url: full, body: '{}' };
}

const namesAgent = (path: string) => /\{agentId\}|\/agents\/by-slug\/\{slug\}/.test(path);

interface Caller {
  name: string;
  applies(op: Operation): boolean;
  auth(): { bearer?: string; cookie?: string; headers?: Record<string, string> };
}

const callers: Caller[] = [
  { name: 'no credentials', applies: () => true, auth: () => ({}) },
  { name: 'Bearer garbage', applies: () => true, auth: () => ({ headers: { authorization: 'Bearer garbage' } }) },
  { name: "another agent's token", applies: (op) => namesAgent(op.path), auth: () => ({ bearer: tokenA }) },
  {
    name: 'cookie from a foreign Origin',
    applies: (op) => op.method !== 'GET',
    auth: () => ({ cookie: user.cookie, headers: { origin: 'https://evil.example' } }),
  },
  {
    // What another site's page makes a signed-in user's browser send (review 24): refused where a user is needed.
    name: "a read with the cookie that another site's page sent",
    applies: (op) => op.method === 'GET',
    auth: () => ({ cookie: user.cookie, headers: { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' } }),
  },
];

const listed = (op: Operation, status: number) => String(status) in op.op.responses;
const describeAnswer = (op: Operation, url: string, res: { status: number; body?: Json; text: string }) =>
  `${op.operationId} (${op.method} ${url}): ${res.status} ${res.body?.error?.code ?? res.body?.code ?? res.text.slice(0, 80)}; lists ${Object.keys(op.op.responses).join(',')}`;

describe('/openapi.json lists the statuses a wrongly sent request gets (review 32)', () => {
  it('a JSON body sent as text/plain: every operation taking JSON, ours and the auth library\'s, lists the 415 it answers', async () => {
    // The auth library's operations get a user of their own: were one to act on the body anyway (a sign-out), the
    // admin's session stays for the tests below.
    const libraryUser = await signUp(t, { verified: true });
    const ops = operations({ library: true }).filter((op) => op.op.requestBody?.content?.['application/json']);
    expect(ops.length).toBeGreaterThan(60);
    const unlisted: string[] = [];
    const statuses = new Map<number, number>();
    for (const op of ops) {
      const { url } = request(op);
      const res = await t.http.call(op.method, url, {
        cookie: op.path.startsWith('/api/auth/') ? libraryUser.cookie : admin.cookie,
        headers: { origin: t.baseUrl, 'content-type': 'text/plain' },
        body: '{}',
      });
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      if (!listed(op, res.status)) unlisted.push(describeAnswer(op, url, res));
    }
    expect(unlisted).toEqual([]);
    // The requests did reach the rule: nearly every one was refused for its type.
    expect(statuses.get(415)).toBeGreaterThan(ops.length - 5);
  }, 120_000);

  it('a malformed path or query value (an id that is not a UUID): every operation lists the status it answers', async () => {
    const unlisted: string[] = [];
    let refused = 0;
    let calls = 0;
    for (const op of operations()) {
      const params: Json[] = op.op.parameters ?? [];
      const { url: valid, json, body } = request(op);
      const urls: string[] = [];
      const badPath = params.filter((p) => p.in === 'path' && malformed(p.schema ?? {}) !== undefined);
      if (badPath.length) {
        urls.push(op.path.replace(/\{([^}]+)\}/g, (_, name: string) => {
          const param = params.find((p) => p.in === 'path' && p.name === name);
          return encodeURIComponent(malformed(param?.schema ?? {}) ?? pathValue(name, param));
        }));
      }
      const badQuery = params.find((p) => p.in === 'query' && malformed(p.schema ?? {}) !== undefined);
      if (badQuery) {
        const url = new URL(valid, t.baseUrl);
        url.searchParams.set(badQuery.name, malformed(badQuery.schema)!);
        urls.push(url.pathname + url.search);
      }
      for (const url of urls) {
        calls++;
        const res = await t.http.call(op.method, url, {
          cookie: admin.cookie,
          headers: { origin: t.baseUrl },
          ...(json !== undefined ? { json } : {}),
          ...(body !== undefined ? { body } : {}),
        });
        if (res.status === 400) refused++;
        if (!listed(op, res.status)) unlisted.push(describeAnswer(op, url, res));
      }
    }
    expect(calls).toBeGreaterThan(60);
    expect(unlisted).toEqual([]);
    // The requests did reach the validation: most were refused as malformed (the rest by a rule that runs first).
    expect(refused).toBeGreaterThan(calls * 0.8);
  }, 120_000);
});

describe('/openapi.json lists every status an operation answers to the standard hostile callers', () => {
  it('for every operation and every caller that applies, the answer is a listed status in the error envelope', async () => {
    const ops = operations();
    expect(ops.length).toBeGreaterThan(80);
    const unlisted: string[] = [];
    for (const op of ops) {
      const { url, json, body } = request(op);
      for (const caller of callers) {
        if (!caller.applies(op)) continue;
        const res = await t.http.call(op.method, url, { ...caller.auth(), ...(json !== undefined ? { json } : {}), ...(body !== undefined ? { body } : {}) });
        if (!(String(res.status) in op.op.responses)) {
          unlisted.push(`${op.operationId} (${op.method} ${url}) ${caller.name}: ${res.status} ${res.body?.error?.code ?? ''}; lists ${Object.keys(op.op.responses).join(',')}`);
        } else if (res.status >= 400 && (res.body?.status !== 'error' || typeof res.body?.error?.code !== 'string')) {
          unlisted.push(`${op.operationId} (${op.method} ${url}) ${caller.name}: ${res.status} not in the envelope: ${res.text.slice(0, 200)}`);
        }
      }
    }
    expect(unlisted).toEqual([]);
  }, 120_000);

  it('the requests are valid but for their credentials: every operation that needs a caller answers 401 to none', async () => {
    // Otherwise a 400 for a malformed body would hide the status the test means to see.
    const refused: string[] = [];
    for (const op of operations()) {
      if (!op.op.security?.length) continue;
      const { url, json, body } = request(op);
      const res = await t.http.call(op.method, url, { ...(json !== undefined ? { json } : {}), ...(body !== undefined ? { body } : {}) });
      if (res.status !== 401) refused.push(`${op.operationId} (${op.method} ${url} ${JSON.stringify(json)}): ${res.status} ${res.text.slice(0, 200)}`);
    }
    expect(refused).toEqual([]);
  });

  it('every listed error status references the error envelope (or a schema of the same shape)', () => {
    const bad: string[] = [];
    for (const op of operations()) {
      for (const [status, response] of Object.entries<Json>(op.op.responses)) {
        if (Number(status) < 400 || op.path === '/ready') continue;
        const schema = response.content?.['application/json']?.schema;
        const refs = JSON.stringify(schema ?? {}).match(/#\/components\/schemas\/\w+/g) ?? [];
        if (!refs.some((r) => ['Error', 'RateLimitedError', 'QuotaExceededError'].includes(r.split('/').pop()!))) {
          bad.push(`${op.operationId} ${status}`);
        }
      }
    }
    expect(bad).toEqual([]);
  });

  it('usage operations list 503 UNAVAILABLE with Retry-After (docs/errors.md: retry 503 with the same clientReqId)', () => {
    const missing: string[] = [];
    for (const op of operations()) {
      if (!op.path.startsWith('/me/usage/')) continue;
      const unavailable = op.op.responses['503'];
      if (!unavailable?.headers?.['Retry-After']) missing.push(op.operationId);
    }
    expect(missing).toEqual([]);
  });
});
