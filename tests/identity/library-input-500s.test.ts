import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * Client input that made /api/auth answer 500 (contract: "A 500 on any client input is a bug"), found by a review's
 * probe of hostile input over every route; and client input that sized or raised the service's log. Each request is
 * sent by an anonymous caller unless said.
 */

let t: TestApp;
let admin: TestUser;
let victim: TestUser;

beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  victim = await signUp(t, { verified: true });
});
afterAll(() => t?.close());

const json = { 'content-type': 'application/json' };
const errorLines = (from: number) => t.logs.slice(from).filter((l) => l.level === 'error');
const deep = (depth: number) => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);

describe('the auth library answers bad input with a 4xx, never a 500', () => {
  it('a deeply nested body on change-password (our before hook hands the body back to the library, which deep-merges it)', async () => {
    const before = t.logs.length;
    const res = await t.http.post('/api/auth/change-password', {
      headers: json,
      body: `{"currentPassword":"a","newPassword":"b","x":${deep(20_000)}}`,
    });
    expect([res.status, res.body.code], res.text).toEqual([400, 'VALIDATION_ERROR']);
    expect(errorLines(before)).toEqual([]);
  });

  it('a deeply nested body on invite-member with `resend` (same hook, same merge)', async () => {
    const before = t.logs.length;
    const res = await t.http.post('/api/auth/organization/invite-member', {
      cookie: admin.cookie,
      headers: { ...json, origin: t.baseUrl },
      body: `{"email":"x@example.test","role":"member","resend":true,"x":${deep(20_000)}}`,
    });
    expect([res.status, res.body.code], res.text).toEqual([400, 'VALIDATION_ERROR']);
    expect(errorLines(before)).toEqual([]);
  });

  it('a role nested 10,000 deep on set-role or update-user (the self-demotion check read it with String()), anonymous or admin (review 23)', async () => {
    const nested = '['.repeat(10_000) + '"platform_admin"' + ']'.repeat(10_000);
    for (const cookie of [undefined, admin.cookie]) {
      for (const [path, body] of [
        ['/api/auth/admin/set-role', `{"userId":${JSON.stringify(admin.userId)},"role":${nested}}`],
        ['/api/auth/admin/update-user', `{"userId":${JSON.stringify(admin.userId)},"data":{"role":${nested}}}`],
      ] as const) {
        const before = t.logs.length;
        const res = await t.http.post(path, { ...(cookie ? { cookie } : {}), headers: { ...json, origin: t.baseUrl }, body });
        expect([path, res.status < 500], res.text.slice(0, 200)).toEqual([path, true]);
        expect(errorLines(before)).toEqual([]);
      }
    }
    expect((await t.http.get('/me', { cookie: admin.cookie })).body.data.role).toBe('platform_admin');
  });

  it('`__proto__` as a field of admin/update-user data (USER_FIELDS is read through the prototype), even anonymously', async () => {
    for (const cookie of [undefined, admin.cookie]) {
      const before = t.logs.length;
      const res = await t.http.post('/api/auth/admin/update-user', {
        ...(cookie ? { cookie } : {}),
        headers: { ...json, origin: t.baseUrl },
        body: `{"userId":${JSON.stringify(victim.userId)},"data":{"__proto__":{"x":1}}}`,
      });
      expect([res.status, res.body.code], res.text).toEqual([400, 'VALIDATION_ERROR']);
      expect(errorLines(before)).toEqual([]);
    }
  });

  it('Object.prototype names as fields of admin/update-user data are refused as unknown fields', async () => {
    for (const field of ['constructor', 'toString', 'valueOf', 'isPrototypeOf']) {
      const res = await t.http.post('/api/auth/admin/update-user', {
        cookie: admin.cookie,
        headers: { origin: t.baseUrl },
        json: { userId: victim.userId, data: { [field]: 'x' } },
      });
      expect(res.status, `${field}: ${res.text}`).toBe(400);
    }
  });

  it('an `oauth_query` that is not a string, on any /api/auth POST (the OAuth plugin builds URLSearchParams from it)', async () => {
    for (const [path, body] of [
      ['/api/auth/sign-in/email', { email: 'nobody@example.test', password: 'x', oauth_query: [[]] }],
      ['/api/auth/sign-up/email', { email: 'nobody2@example.test', password: 'password-123', name: 'N', oauth_query: [{}] }],
      ['/api/auth/oauth2/continue', { selected: true, oauth_query: [[]] }],
    ] as const) {
      const before = t.logs.length;
      const res = await t.http.post(path, { headers: { origin: t.baseUrl }, json: body });
      expect([res.status, res.body.code], `${path}: ${res.text}`).toEqual([400, 'VALIDATION_ERROR']);
      expect(errorLines(before)).toEqual([]);
    }
  });
});

describe('userinfo reads a form access_token into a header', () => {
  it('answers 401 invalid_token, not 500, for a form token that is not a header value (a char over U+00FF, a newline)', async () => {
    // %ED%A0%80 is a UTF-16 surrogate spelled in UTF-8: it decodes to U+FFFD; %E2%82%AC is the euro sign, %0A a newline.
    for (const token of ['%ED%A0%80', 'abc%E2%82%AC', 'a%0Ab']) {
      const before = t.logs.length;
      const res = await t.http.post('/api/auth/oauth2/userinfo', {
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: `access_token=${token}`,
      });
      expect(res.status, `${token}: ${res.text}`).toBe(401);
      expect(errorLines(before)).toEqual([]);
    }
  });
});

describe('client input does not size or raise the log', () => {
  it('a refused callbackURL of 900 KB on sign-in writes no line over 16 KB', async () => {
    const before = t.logs.length;
    const res = await t.http.post('/api/auth/sign-in/email', {
      headers: { origin: t.baseUrl },
      json: { email: 'nobody@example.test', password: 'x', callbackURL: 'x'.repeat(900_000) },
    });
    expect(res.status).toBe(403);
    const sizes = t.logs.slice(before).map((l) => JSON.stringify(l).length);
    expect(Math.max(...sizes)).toBeLessThan(16 * 1024);
  });

  it('a refused callbackURL or redirectTo is not logged as an error (it is the client\'s mistake, answered 403)', async () => {
    const before = t.logs.length;
    await t.http.post('/api/auth/sign-in/email', {
      headers: { origin: t.baseUrl },
      json: { email: 'nobody@example.test', password: 'x', callbackURL: 'https://evil.example/' },
    });
    await t.http.post('/api/auth/request-password-reset', {
      headers: { origin: t.baseUrl },
      json: { email: 'nobody@example.test', redirectTo: 'https://evil.example/' },
    });
    await t.http.get('/api/auth/callback/anything');
    expect(t.logs.slice(before).filter((l) => l.level === 'error')).toEqual([]);
  });
});
