import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * contract.md's error table: 401 for no, invalid or expired credentials. On a route that needs a signed-in caller the
 * caller is judged before the input (functions/http/router.ts): a malformed request without credentials answered 400
 * with the route's validation issues (a lead of reviews 94 and 52), telling an anonymous caller the shape of a private
 * route's input and not that it must sign in. Public routes answer 400 to anyone, as before.
 */
let t: TestApp;
let user: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  user = await signUp(t);
});
afterAll(() => t?.close());

const badRequests = [
  { method: 'POST', path: '/me/checkout', json: { tierId: 'not-a-uuid' } },
  { method: 'POST', path: '/agents', json: { name: 42 } },
  { method: 'GET', path: '/admin/users?limit=abc' },
  { method: 'GET', path: '/admin/subscriptions?status=bogus' },
] as const;

const send = (r: (typeof badRequests)[number], auth: { cookie?: string; bearer?: string; headers?: Record<string, string> }) =>
  r.method === 'GET' ? t.http.get(r.path, auth) : t.http.post(r.path, { ...auth, json: 'json' in r ? r.json : {} });

describe('a route that needs a caller judges the caller before the input', () => {
  it('anonymous, or with a made-up bearer token: 401 UNAUTHORIZED with the sign-in links, never the validation issues', async () => {
    for (const r of badRequests) {
      for (const auth of [{}, { bearer: 'not-a-real-token' }]) {
        const res = await send(r, auth);
        expect([r.path, res.status, res.body.error?.code], res.text).toEqual([r.path, 401, 'UNAUTHORIZED']);
        expect(res.body.error.details).toMatchObject({ signInUrl: expect.any(String) });
        expect(res.body.error.details.issues).toBeUndefined();
      }
    }
  });

  it("signed in: the same requests are 400 VALIDATION_ERROR, as before (a route's role check comes after its input)", async () => {
    const statuses: Array<[string, number, string]> = [];
    for (const r of badRequests) {
      const res = await send(r, { cookie: user.cookie, headers: { origin: t.baseUrl } });
      statuses.push([r.path, res.status, res.body.error?.code]);
    }
    expect(statuses).toEqual([
      ['/me/checkout', 400, 'VALIDATION_ERROR'],
      ['/agents', 400, 'VALIDATION_ERROR'],
      ['/admin/users?limit=abc', 400, 'VALIDATION_ERROR'],
      ['/admin/subscriptions?status=bogus', 400, 'VALIDATION_ERROR'],
    ]);
  });

  it('a public route answers a malformed request 400 to anyone', async () => {
    const res = await t.http.get('/agents?limit=abc');
    expect([res.status, res.body.error?.code]).toEqual([400, 'VALIDATION_ERROR']);
  });
});
