import { connect } from 'node:net';
import { createRoute, z } from '@hono/zod-openapi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ok } from '../../functions/http/envelope.ts';
import { ApiError, errorStatus, type ErrorCode } from '../../functions/http/errors.ts';
import { jsonBody, jsonResponse, newRouter, uuidParam } from '../../functions/http/router.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp } from '../support/users.ts';
import type { RawBuilder } from 'kysely';
import { sql } from '../../functions/platform/db.ts';

/**
 * The HTTP contract layer (contract.md section 1) as a client sees it: envelopes, the status of each error the
 * layer produces, X-Request-Id, and the one log line per request. The routes under /__test exist only in this
 * test: they are mounted on the real app (same middleware, error handler and router factory as every domain).
 */

const echoBody = z.object({ name: z.string().min(1), nested: z.object({ count: z.int() }) });

function testRoutes() {
  const router = newRouter();
  router.openapi(
    createRoute({
      method: 'post',
      path: '/__test/echo',
      request: { body: jsonBody(echoBody) },
      responses: { 201: jsonResponse(z.object({}), 'echoed') },
    }),
    (c) => c.json(ok(c.req.valid('json')), 201),
  );
  router.openapi(
    createRoute({
      method: 'get',
      path: '/__test/things/{thingId}',
      request: { params: z.object({ thingId: uuidParam('thingId') }) },
      responses: { 200: jsonResponse(z.object({}), 'a thing') },
    }),
    (c) => c.json(ok({ id: c.req.valid('param').thingId }), 200),
  );
  router.get('/__test/boom', () => {
    throw new Error('kaboom: internal detail that must not reach the client');
  });
  router.get('/__test/fail/:code', (c) => {
    const code = c.req.param('code') as ErrorCode;
    throw new ApiError(code, `failing with ${code}`, { why: 'test' }, code === 'RATE_LIMITED' ? { 'Retry-After': '7' } : {});
  });
  return router;
}

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ routes: (app) => app.route('/', testRoutes()) });
});
afterAll(() => t.close());

/**
 * A raw HTTP/1.1 exchange over a TCP socket, for what fetch cannot send (chunked uploads, no Content-Type, huge
 * bodies). It reads the answer while still writing, as a real client does: the server may answer 413 and close
 * the connection before it has read everything we send, which is the point of those tests.
 */
function rawRequest(options: {
  method: string;
  path: string;
  headers?: Record<string, string>;
  chunks?: Buffer[];
}): Promise<{ status: number; headers: Record<string, string>; body: any }> {
  const url = new URL(options.path, t.baseUrl);
  const chunked = options.headers?.['transfer-encoding'] === 'chunked';
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname);
    let received = Buffer.alloc(0);
    let done = false;
    const tryParse = () => {
      const headEnd = received.indexOf('\r\n\r\n');
      if (headEnd < 0) return;
      const [statusLine, ...headerLines] = received.subarray(0, headEnd).toString('latin1').split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of headerLines) {
        const i = line.indexOf(':');
        headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      const length = Number(headers['content-length'] ?? 0);
      const body = received.subarray(headEnd + 4);
      if (body.length < length) return;
      done = true;
      socket.destroy();
      const text = body.subarray(0, length).toString('utf8');
      resolve({ status: Number(statusLine!.split(' ')[1]), headers, body: text ? JSON.parse(text) : undefined });
    };
    socket.on('data', (d: Buffer) => {
      received = Buffer.concat([received, d]);
      tryParse();
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (!done && err.code !== 'EPIPE' && err.code !== 'ECONNRESET') reject(err);
    });
    socket.on('close', () => {
      if (!done) reject(new Error(`connection closed before a complete response (${received.length} bytes received)`));
    });
    socket.on('connect', async () => {
      const head = [`${options.method} ${url.pathname}${url.search} HTTP/1.1`, `host: ${url.host}`, 'connection: close'];
      for (const [k, v] of Object.entries(options.headers ?? {})) head.push(`${k}: ${v}`);
      const write = (data: Buffer | string) =>
        done || socket.destroyed ? Promise.resolve() : new Promise<void>((r) => (socket.write(data) ? r() : socket.once('drain', r)));
      await write(`${head.join('\r\n')}\r\n\r\n`);
      for (const chunk of options.chunks ?? []) {
        if (chunked) await write(`${chunk.length.toString(16)}\r\n`);
        await write(chunk);
        if (chunked) await write('\r\n');
      }
      if (chunked) await write('0\r\n\r\n');
    });
  });
}

const MiB = 1024 * 1024;

describe('envelope shapes', () => {
  it('success: exactly status, data and error (null)', async () => {
    const res = await t.http.post('/__test/echo', { json: { name: 'a', nested: { count: 1 } } });
    expect(res.status).toBe(201);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.body).toStrictEqual({ status: 'success', data: { name: 'a', nested: { count: 1 } }, error: null });
  });

  it('failure: status error, data null, error with code, message and details object', async () => {
    const res = await t.http.get('/__test/fail/CONFLICT');
    expect(res.status).toBe(409);
    expect(res.body).toStrictEqual({
      status: 'error',
      data: null,
      error: { code: 'CONFLICT', message: 'failing with CONFLICT', details: { why: 'test' } },
    });
  });

  it('every error code answers its documented status in the envelope', async () => {
    for (const [code, status] of Object.entries(errorStatus)) {
      const res = await t.http.get(`/__test/fail/${code}`);
      expect(res.status, code).toBe(status);
      expect(res.body.status).toBe('error');
      expect(res.body.error.code).toBe(code);
    }
  });

  it('401 always carries signInUrl and signUpUrl', async () => {
    const res = await t.http.get('/__test/fail/UNAUTHORIZED');
    expect(res.status).toBe(401);
    expect(res.body.error.details).toMatchObject({ signInUrl: `${t.baseUrl}/sign-in`, signUpUrl: `${t.baseUrl}/sign-up`, why: 'test' });
  });

  it('an error can set response headers (Retry-After on 429)', async () => {
    const res = await t.http.get('/__test/fail/RATE_LIMITED');
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('7');
  });
});

describe('validation', () => {
  it('a zod failure is 400 VALIDATION_ERROR listing each field path', async () => {
    const res = await t.http.post('/__test/echo', { json: { name: '', nested: { count: 'x' } } });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('VALIDATION_ERROR');
    const paths = res.body.error.details.issues.map((i: { path: string }) => i.path).sort();
    expect(paths).toEqual(['name', 'nested.count']);
    for (const issue of res.body.error.details.issues) expect(issue.message).toEqual(expect.any(String));
  });

  it('path parameters are validated too, and named by where they came from', async () => {
    const res = await t.http.get('/__test/things/not-a-uuid');
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('VALIDATION_ERROR');
    expect(res.body.error.details.issues).toEqual([{ path: 'param.thingId', message: 'thingId must be a UUID' }]);
  });

  it('a JSON route called with no body and no Content-Type validates {} (400, not a crash)', async () => {
    const res = await t.http.post('/__test/echo');
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('VALIDATION_ERROR');
    expect(res.body.error.details.issues.map((i: { path: string }) => i.path).sort()).toEqual(['name', 'nested']);
  });

  it('malformed JSON is 400 VALIDATION_ERROR, its details.issues naming the body as every VALIDATION_ERROR does (review 56)', async () => {
    const res = await t.http.post('/__test/echo', { body: '{"name": "a", ', headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      status: 'error',
      data: null,
      error: { code: 'VALIDATION_ERROR', message: 'The body is not valid JSON', details: { issues: [{ path: 'body', message: 'The body is not valid JSON' }] } },
    });
  });

  it.each([
    ['text/plain', 'name=a'],
    ['application/x-www-form-urlencoded', 'name=a'],
    ['multipart/form-data; boundary=x', '--x--'],
  ])('a %s body on a JSON route is 415 UNSUPPORTED_MEDIA_TYPE', async (contentType, body) => {
    const res = await t.http.post('/__test/echo', { body, headers: { 'content-type': contentType } });
    expect(res.status).toBe(415);
    expect(res.body.error.code).toBe('UNSUPPORTED_MEDIA_TYPE');
  });

  it('a body without any Content-Type on a JSON route is 415', async () => {
    const res = await rawRequest({
      method: 'POST',
      path: '/__test/echo',
      headers: { 'content-length': '2' },
      chunks: [Buffer.from('{}')],
    });
    expect(res.status).toBe(415);
    expect(res.body.error.code).toBe('UNSUPPORTED_MEDIA_TYPE');
  });
});

describe('body size limit (1 MiB)', () => {
  const jsonOfSize = (bytes: number) => {
    const prefix = '{"name":"';
    const suffix = '","nested":{"count":1}}';
    return Buffer.from(prefix + 'x'.repeat(bytes - prefix.length - suffix.length) + suffix);
  };

  it('accepts a body of exactly 1 MiB', async () => {
    const body = jsonOfSize(MiB);
    const res = await rawRequest({
      method: 'POST',
      path: '/__test/echo',
      headers: { 'content-type': 'application/json', 'content-length': String(body.length) },
      chunks: [body],
    });
    expect(res.status).toBe(201);
  });

  it('refuses 1 MiB + 1 byte with Content-Length: 413 PAYLOAD_TOO_LARGE', async () => {
    const body = jsonOfSize(MiB + 1);
    const res = await rawRequest({
      method: 'POST',
      path: '/__test/echo',
      headers: { 'content-type': 'application/json', 'content-length': String(body.length) },
      chunks: [body],
    });
    expect(res.status).toBe(413);
    expect(res.body).toMatchObject({ status: 'error', data: null, error: { code: 'PAYLOAD_TOO_LARGE' } });
    expect(res.headers['x-request-id']).toEqual(expect.any(String));
  });

  it('refuses a huge chunked body sent without Content-Length', async () => {
    const chunk = Buffer.alloc(64 * 1024, 'x');
    const res = await rawRequest({
      method: 'POST',
      path: '/__test/echo',
      headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      chunks: Array.from({ length: 64 }, () => chunk), // 4 MiB
    });
    expect(res.status).toBe(413);
    expect(res.body.error.code).toBe('PAYLOAD_TOO_LARGE');
    expect(res.headers['x-request-id']).toEqual(expect.any(String));
  });

  it('counts a chunked body exactly: 1 MiB + 1 byte in one chunk is refused', async () => {
    const res = await rawRequest({
      method: 'POST',
      path: '/__test/echo',
      headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      chunks: [jsonOfSize(MiB + 1)],
    });
    expect(res.status).toBe(413);
  });
});

describe('unknown routes and unexpected errors', () => {
  it('an unknown route is a 404 envelope', async () => {
    const res = await t.http.get('/no/such/route');
    expect(res.status).toBe(404);
    expect(res.body).toMatchObject({ status: 'error', data: null, error: { code: 'NOT_FOUND' } });
  });

  it('a known path with another method is a 404 envelope too', async () => {
    const res = await t.http.delete('/health');
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('NOT_FOUND');
  });

  it('a thrown error is 500 INTERNAL whose body carries only the request id, and the stack is logged', async () => {
    const res = await t.http.get('/__test/boom', { headers: { 'x-request-id': 'boom-1' } });
    expect(res.status).toBe(500);
    expect(res.body).toStrictEqual({
      status: 'error',
      data: null,
      error: { code: 'INTERNAL', message: 'Internal error', details: { requestId: 'boom-1' } },
    });
    expect(res.text).not.toContain('kaboom');
    const logged = t.logs.find((l) => l.level === 'error' && l.requestId === 'boom-1');
    expect(logged).toBeDefined();
    const err = logged!.err as { message: string; stack: string };
    expect(err.message).toContain('kaboom');
    expect(err.stack).toContain('http-layer.test.ts');
  });
});

describe('X-Request-Id', () => {
  const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

  it.each([
    ['GET', '/health', 200],
    ['GET', '/ready', 200],
    ['GET', '/openapi.json', 200],
    ['GET', '/no/such/route', 404],
    ['GET', '/__test/boom', 500],
    ['GET', '/__test/fail/FORBIDDEN', 403],
    ['GET', '/__test/things/x', 400],
  ])('is on %s %s (%i)', async (method, path, status) => {
    const res = await t.http.call(method, path);
    expect(res.status).toBe(status);
    expect(res.headers.get('x-request-id')).toMatch(uuid);
  });

  it('is on /api/auth responses too', async () => {
    const res = await t.http.get('/api/auth/get-session', { headers: { 'x-request-id': 'auth-req-1' } });
    expect(res.headers.get('x-request-id')).toBe('auth-req-1');
  });

  it("echoes the client's id (contract.md) when it is printable ASCII of at most 256 characters, and replaces any other", async () => {
    const echoed = [
      'client:abc-1.2_3',
      'Root=1-67891233-abcdef012345678912345678;Parent=53995c3f42cd8ad8',
      'YWJj+ZGVm/Zw==',
      'has space',
      'x'.repeat(256),
    ];
    for (const id of echoed) {
      expect((await t.http.get('/health', { headers: { 'x-request-id': id } })).headers.get('x-request-id')).toBe(id);
    }
    for (const bad of ['x'.repeat(257), 'caf\u00e9', 'tab\there']) {
      const res = await t.http.get('/health', { headers: { 'x-request-id': bad } });
      expect(res.headers.get('x-request-id')).toMatch(uuid);
    }
  });

  it('gives each request its own id', async () => {
    const ids = await Promise.all(Array.from({ length: 5 }, () => t.http.get('/health').then((r) => r.headers.get('x-request-id'))));
    expect(new Set(ids).size).toBe(5);
  });
});

describe('request log', () => {
  it('writes exactly one structured line per request: method, route, status, duration, request id', async () => {
    const cases = [
      { method: 'GET', path: '/health', route: '/health', status: 200, id: 'log-1' },
      { method: 'POST', path: '/__test/echo', route: '/__test/echo', status: 400, id: 'log-2' },
      { method: 'GET', path: '/__test/things/2c1b1a0e-6a55-4c47-9f0a-8a9d4b1e2f30', route: '/__test/things/:thingId', status: 200, id: 'log-3' },
      { method: 'GET', path: '/__test/boom', route: '/__test/boom', status: 500, id: 'log-4' },
      { method: 'GET', path: '/nowhere', route: null, status: 404, id: 'log-5' },
      { method: 'POST', path: '/__test/echo', route: '/__test/echo', status: 413, id: 'log-6', body: Buffer.alloc(MiB + 1) },
    ];
    for (const c of cases) {
      await t.http.call(c.method, c.path, { headers: { 'x-request-id': c.id, 'content-type': 'application/json' }, body: c.body });
      const lines = t.logs.filter((l) => l.msg === 'request' && l.requestId === c.id);
      expect(lines, c.path).toHaveLength(1);
      const line = lines[0]!;
      expect(line).toMatchObject({ level: 'info', method: c.method, path: c.path.split('?')[0], status: c.status, requestId: c.id });
      expect(line.route).toBe(c.route);
      expect(typeof line.durationMs).toBe('number');
      expect(line.durationMs as number).toBeGreaterThanOrEqual(0);
      expect(new Date(line.time as string).toISOString()).toBe(line.time);
    }
  });
});

describe('NUL characters (PostgreSQL text cannot hold them)', () => {
  let nulApp: TestApp;
  beforeAll(async () => {
    nulApp = await startTestApp();
  });
  afterAll(() => nulApp.close());

  it('refuses %00 in a path or query with 400 VALIDATION_ERROR, on our routes and the auth library', async () => {
    for (const path of ['/agents?q=a%00b', '/agents/by-slug/a%00b', '/agents?tag=x%00', '/api/auth/get-session?x=%00']) {
      const res = await nulApp.http.get(path);
      expect(res.status, path).toBe(400);
      expect(res.body.error.code, path).toBe('VALIDATION_ERROR');
    }
  });

  it('refuses a \\u0000 escape in a JSON body and %00 in a form body, and stores nothing', async () => {
    const signUp = await nulApp.http.post('/api/auth/sign-up/email', {
      json: { email: 'nul@example.com', password: 'a-long-password-1', name: 'Nul\u0000Name' },
    });
    expect(signUp.status).toBe(400);
    expect(signUp.body.error.code).toBe('VALIDATION_ERROR');
    const users = await sql<{ n: number }>`select count(*)::int as n from "user" where email = 'nul@example.com'`.execute(nulApp.db);
    expect(users.rows[0]!.n).toBe(0);

    const token = await nulApp.http.post('/api/auth/oauth2/token', {
      body: 'grant_type=authorization_code&code=%00',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(token.status).toBe(400);
  });

  it('refuses a raw NUL byte in a form or JSON body (it reached the token endpoint: 500)', async () => {
    const token = await nulApp.http.post('/api/auth/oauth2/token', {
      body: 'grant_type=refresh_token&refresh_token=a\u0000b&client_id=x\u0000y',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(token.status).toBe(400);
    expect(token.body.error.code).toBe('VALIDATION_ERROR');
    const signUp = await nulApp.http.post('/api/auth/sign-up/email', {
      body: '{"email":"rawnul@example.com","password":"a-long-password-1","name":"Raw\u0000Nul"}',
      headers: { 'content-type': 'application/json' },
    });
    expect(signUp.status).toBe(400);
  });

  it('refuses a NUL in the client credentials of a Basic header (the OAuth endpoints look the client up by it)', async () => {
    for (const credentials of ['a%00:secret', 'agent:se%00cret', 'a\u0000b:secret']) {
      for (const path of ['/api/auth/oauth2/token', '/api/auth/oauth2/introspect', '/api/auth/oauth2/revoke']) {
        const res = await nulApp.http.post(path, {
          body: 'grant_type=refresh_token&refresh_token=x&token=x',
          headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${btoa(credentials)}` },
        });
        expect(res.status, `${path} ${credentials}`).toBe(400);
        expect(res.body.error.code).toBe('VALIDATION_ERROR');
      }
    }
  });

  it('accepts an escaped backslash followed by u0000, which is not a NUL', async () => {
    const res = await nulApp.http.post('/api/auth/sign-in/email', {
      json: { email: 'nobody@example.com', password: 'literal \\u0000 text' },
    });
    expect(res.status).toBe(401);
  });
});

describe('lone UTF-16 surrogates in a JSON body (not Unicode: jsonb and the auth library refuse them)', () => {
  let app: TestApp;
  const LONE = 'ok\ud800x';
  const count = async (query: RawBuilder<{ n: number }>) => (await query.execute(app.db)).rows[0]!.n;
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(() => app.close());

  it('refuses one on our routes with 400 VALIDATION_ERROR and stores nothing, into jsonb or text', async () => {
    const admin = await createAdmin(app);
    const asAdmin = { cookie: admin.cookie, headers: { origin: app.baseUrl } };
    const agent = await app.http.post('/agents', {
      ...asAdmin,
      json: { slug: 'lone-tags', name: 'Lone', description: 'd', redirectUris: ['http://127.0.0.1:9/callback'], tags: [LONE] },
    });
    expect(agent.status, agent.text).toBe(400);
    expect(agent.body.error.code).toBe('VALIDATION_ERROR');
    expect(agent.body.error.message).toBe('Text must be well-formed Unicode');
    expect(await count(sql`select count(*)::int as n from public.agents where slug = 'lone-tags'`)).toBe(0);
    // A text column took it as U+FFFD before: refused alike, so one value never means two things.
    const tag = await app.http.post('/tags', { ...asAdmin, json: { name: LONE } });
    expect(tag.status, tag.text).toBe(400);
    // As a key, and the low half alone.
    const key = await app.http.post('/tags', { ...asAdmin, json: { name: 'fine', ['\udc00']: 1 } });
    expect(key.status, key.text).toBe(400);
    expect(await count(sql`select count(*)::int as n from public.tags`)).toBe(0);
  });

  it('refuses one under /api/auth before the library runs: no account, and a known and an unknown address answer alike', async () => {
    await signUp(app, { email: 'known@example.com' });
    const signUpFresh = await app.http.post('/api/auth/sign-up/email', {
      json: { email: 'fresh@example.com', password: 'a-long-password-1', name: 'Fresh', callbackURL: '/x\ud800' },
    });
    expect(signUpFresh.status, signUpFresh.text).toBe(400);
    expect(signUpFresh.body.error.code).toBe('VALIDATION_ERROR');
    expect(await count(sql`select count(*)::int as n from "user" where email = 'fresh@example.com'`)).toBe(0);
    for (const path of ['/api/auth/request-password-reset', '/api/auth/send-verification-email']) {
      const answers = [];
      for (const email of ['known@example.com', 'nobody@example.com']) {
        const res = await app.http.post(path, { json: { email, redirectTo: '/x\ud800', callbackURL: '/x\ud800' } });
        answers.push(res.status);
      }
      expect(answers, path).toEqual([400, 400]);
    }
    // a type that names JSON but is not it: the library parsed `application/jsonx` as JSON past the guard (500 for a
    // known address, 200 for an unknown one), and failed on `multipart/form-data+application/json` (500)
    for (const type of ['application/jsonx', 'application/json5', 'text/json', 'multipart/form-data+application/json; boundary=b']) {
      const res = await app.http.post('/api/auth/request-password-reset', {
        headers: { 'content-type': type },
        body: '{"email":"known@example.com","redirectTo":"/x\\ud800"}',
      });
      expect(res.status, type).toBe(415);
      expect(res.body.error.code, type).toBe('UNSUPPORTED_MEDIA_TYPE');
    }
    // a type that names a form but is not one: the library took it for a form and the runtime's formData() threw on
    // it, 500 to anyone (review 101); a real form type with parameters is read as before
    for (const type of ['application/x-www-form-urlencodedx', 'text/application/x-www-form-urlencoded', 'multipart/form-datax; boundary=b']) {
      const res = await app.http.post('/api/auth/sign-up/email', {
        headers: { 'content-type': type },
        body: 'email=form-type%40example.com&password=pw-12345678-abc&name=Odd',
      });
      expect([res.status, res.body.error?.code], type).toEqual([415, 'UNSUPPORTED_MEDIA_TYPE']);
    }
    const form = await app.http.post('/api/auth/sign-up/email', {
      headers: { 'content-type': 'application/x-www-form-urlencoded; charset=UTF-8' },
      body: 'email=form-type%40example.com&password=pw-12345678-abc&name=Form',
    });
    expect(form.status, form.text).toBe(200);
    // still JSON: a +json type and a charset parameter
    const vendor = await app.http.post('/api/auth/request-password-reset', {
      headers: { 'content-type': 'application/vnd.api+json; charset=utf-8' },
      body: '{"email":"known@example.com","redirectTo":"/x\\ud800"}',
    });
    expect(vendor.status).toBe(400);
    // a request without a body is not judged by its content type
    expect((await app.http.get('/agents', { headers: { 'content-type': 'text/json' } })).status).toBe(200);
  });

  it('accepts a surrogate pair (an emoji written as escapes) and an escaped backslash before ud800', async () => {
    const admin = await createAdmin(app, { email: 'pair-admin@example.com' });
    const post = (body: string) => app.http.post('/tags', { cookie: admin.cookie, headers: { 'content-type': 'application/json' }, body });
    const pair = await post('{"name":"rocket \\ud83d\\ude80"}');
    expect(pair.status, pair.text).toBe(201);
    expect(pair.body.data.name).toBe('rocket \u{1f680}');
    const literal = await post('{"name":"literal \\\\ud800"}');
    expect(literal.status, literal.text).toBe(201);
    expect(literal.body.data.name).toBe('literal \\ud800');
  });
});

