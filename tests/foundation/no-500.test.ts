import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * "A 500 on any client input is a bug": every operation in /openapi.json, called by an admin, an ordinary user
 * and an anonymous caller with malformed path ids, odd query strings and bodies of the wrong shape, must answer
 * a 4xx (or 501/503 where the contract says so) in the envelope, never a 5xx failure of ours.
 */

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
    for (const op of ops) {
      if (op.path.startsWith('/webhooks/')) continue; // signature-checked raw body, covered by the billing tests
      for (const [who, auth] of callers) {
        for (const value of pathValues) {
          const url = `${fill(op.path, value)}?limit=abc&cursor=%%%&from=yesterday&q=${'z'.repeat(50)}`;
          const requests = op.method === 'GET' || op.method === 'DELETE' ? [undefined] : bodies;
          for (const json of requests) {
            const res = await t.http.call(op.method, url, { ...auth, ...(json !== undefined ? { json } : {}) });
            if (res.status >= 500 && !allowed5xx.has(res.status)) {
              failures.push(`${who} ${op.method} ${url} ${JSON.stringify(json)} -> ${res.status} ${res.text.slice(0, 200)}`);
            }
          }
        }
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
