import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { sql } from '../../functions/platform/db.ts';
import { accessTokenFor, postForm } from '../support/oauth.ts';
import { meteredAgent } from '../metering/support.ts';

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

  it("a bearer-only route (usage writes, reservations) refuses a cookie session 403 whatever it sent, before its input's 400", async () => {
    const agent = '00000000-0000-4000-8000-000000000001';
    const writes = [
      `/me/usage/${agent}/calls/increment`,
      `/me/usage/${agent}/calls/decrement`,
      `/me/usage/${agent}/calls/reservations`,
      `/me/usage/${agent}/reservations/not-a-uuid/commit`,
    ];
    const answers: Array<[string, number, string, unknown]> = [];
    for (const path of writes) {
      const res = await t.http.post(path, { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { amount: 'lots', clientReqId: 7 } });
      answers.push([path, res.status, res.body.error?.code, res.body.error?.details?.issues]);
    }
    expect(answers).toEqual(writes.map((path) => [path, 403, 'FORBIDDEN', undefined]));
    // Without credentials it is still 401.
    const anonymous = await t.http.post(writes[0]!, { json: { amount: 'lots' } });
    expect([anonymous.status, anonymous.body.error?.code]).toEqual([401, 'UNAUTHORIZED']);
  });

  it("a bearer-only route judges the whole token before the input: a revoked one, a banned user's, is 401 (review 111)", async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    const malformed = { amount: 'lots', clientReqId: 7 };
    const revoked = await signUp(t);
    const tokens = await accessTokenFor(t, revoked, { agentId: a.agentId });
    expect((await postForm(t, '/api/auth/oauth2/revoke', tokens, { token: tokens.accessToken, token_type_hint: 'access_token' })).status).toBe(200);
    const banned = await signUp(t);
    const { accessToken } = await accessTokenFor(t, banned, { agentId: a.agentId });
    await sql`update "user" set banned = true where id = ${banned.userId}`.execute(t.db);
    const answers = [];
    for (const [bearer, path] of [
      [tokens.accessToken, `/me/usage/${a.agentId}/calls/increment`],
      [accessToken, `/me/usage/${a.agentId}/calls/reservations`],
    ] as const) {
      const res = await t.http.post(path, { bearer, json: malformed });
      answers.push([res.status, res.body.error?.code, res.body.error?.details?.issues]);
    }
    expect(answers).toEqual([
      [401, 'UNAUTHORIZED', undefined],
      [401, 'UNAUTHORIZED', undefined],
    ]);
  });

  it('a public route answers a malformed request 400 to anyone', async () => {
    const res = await t.http.get('/agents?limit=abc');
    expect([res.status, res.body.error?.code]).toEqual([400, 'VALIDATION_ERROR']);
  });
});
