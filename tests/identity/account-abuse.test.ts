import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { MAILS_PER_RECIPIENT_PER_HOUR } from '../../functions/auth/recipient-allowance.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';

/**
 * What a hostile caller tried on the account endpoints, and what it gets (found by a review): a mail bomb in the
 * service's name, password guesses through a session, names the rest of the service refuses, a 500 from a bearer
 * header of odd types.
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '30', AUTH_FAILED_SIGNINS_PER_ACCOUNT: '3' } });
});
afterAll(() => t.close());

describe('account mails per recipient', () => {
  it(`attack: naming one address on every endpoint that mails it sends it ${MAILS_PER_RECIPIENT_PER_HOUR} account mails an hour, not 90 a minute`, async () => {
    const victim = await signUp(t); // unverified, so send-verification-email mails it too; its sign-up mail counts
    const bystander = await signUp(t);
    const before = (await mailsTo(t, victim.email)).length;
    expect(before).toBe(1);
    const statuses: number[] = [];
    for (let i = 0; i < 28; i++) {
      statuses.push((await t.http.post('/api/auth/request-password-reset', { json: { email: victim.email } })).status);
      statuses.push((await t.http.post('/api/auth/sign-up/email', { json: { email: victim.email, password: `attacker pw ${i}`, name: 'x' } })).status);
      statuses.push((await t.http.post('/api/auth/send-verification-email', { json: { email: victim.email } })).status);
    }
    // Every request is answered as before (nothing tells the asker a mail was held back)...
    expect(statuses.every((s) => s === 200)).toBe(true);
    // ...and the address got its hour's allowance, no more.
    expect(await mailsTo(t, victim.email)).toHaveLength(MAILS_PER_RECIPIENT_PER_HOUR);
    // Another address is not affected; an hour later the victim can be mailed again.
    expect((await t.http.post('/api/auth/request-password-reset', { json: { email: bystander.email } })).status).toBe(200);
    expect((await mailsTo(t, bystander.email)).filter((m) => /reset/i.test(m.subject))).toHaveLength(1);
    t.clock.advance(61 * 60 * 1000);
    try {
      expect((await t.http.post('/api/auth/request-password-reset', { json: { email: victim.email } })).status).toBe(200);
      expect(await mailsTo(t, victim.email)).toHaveLength(MAILS_PER_RECIPIENT_PER_HOUR + 1);
    } finally {
      t.clock.set(new Date());
    }
    // The count holds no address.
    expect(await first(t.db, sql`select 1 as found from public.rate_limits where key like ${`%${victim.email}%`}`)).toBeUndefined();
  });
});

describe('password guesses with a session', () => {
  it('verify-password, a bare "is this the password?" oracle, is closed', async () => {
    const user = await signUp(t);
    const res = await t.http.post('/api/auth/verify-password', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { password: user.password } });
    expect(res.status).toBe(404);
  });

  it("attack: change-password's currentPassword counts against the account's failed password attempts (then 429, the right one too)", async () => {
    const victim = await signUp(t);
    const asSessionHolder = { cookie: victim.cookie, headers: { origin: t.baseUrl } };
    const change = (currentPassword: string) =>
      t.http.post('/api/auth/change-password', { ...asSessionHolder, json: { currentPassword, newPassword: 'the attacker now owns this' } });
    const wrong: number[] = [];
    for (let i = 0; i < 6; i++) wrong.push((await change(`guess number ${i}`)).status);
    expect(wrong).toEqual([400, 400, 400, 429, 429, 429]);
    const right = await change(victim.password);
    expect({ status: right.status, code: right.body.error?.code }).toEqual({ status: 429, code: 'RATE_LIMITED' });
    // The same allowance as sign-in's: the account's own sign-in waits too.
    expect((await t.http.post('/api/auth/sign-in/email', { json: { email: victim.email, password: victim.password } })).status).toBe(429);
    // A right currentPassword costs nothing: another user changes theirs twice.
    const other = await signUp(t);
    const first1 = await t.http.post('/api/auth/change-password', {
      cookie: other.cookie,
      headers: { origin: t.baseUrl },
      json: { currentPassword: other.password, newPassword: 'second password 1' },
    });
    expect(first1.status, first1.text).toBe(200);
  });
});

describe('the name given at sign-up', () => {
  for (const [label, name] of [
    ['an empty', ''],
    ['a blank', '   '],
    ['a 300,000-character', 'n'.repeat(300_000)],
    ['a missing', undefined],
  ] as const) {
    it(`${label} name is refused (400) as update-user refuses it, and nobody is created`, async () => {
      const email = `name-${randomUUID().slice(0, 8)}@example.test`;
      const res = await t.http.post('/api/auth/sign-up/email', { json: { email, password: 'long enough password', name } });
      const stored = await first(t.db, sql`select 1 as found from "user" where email = ${email}`);
      expect({ status: res.status, code: res.body.code, stored }).toEqual({ status: 400, code: 'VALIDATION_ERROR', stored: undefined });
    });
  }
});

describe('a bearer token whose header fields are not strings', () => {
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const token = (header: Record<string, unknown>) => `${b64({ alg: 'EdDSA', kid: 'any-key', ...header })}.${b64({ sub: 'someone', aud: 'x', exp: 9999999999, iat: 1 })}.AAAA`;
  for (const header of [{ typ: 1 }, { typ: {} }, { typ: true }, { kid: 7 }, { alg: ['EdDSA'] }]) {
    it(`GET /me answers 401, not 500 (${JSON.stringify(header)})`, async () => {
      const res = await t.http.get('/me', { bearer: token({ typ: 'at+jwt', ...header }) });
      expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status: 401, code: 'UNAUTHORIZED' });
    });
  }
  it('a public catalog route answers as to anyone (bad credentials are anonymous there), not 500', async () => {
    const res = await t.http.get('/agents', { bearer: token({ typ: 1 }) });
    expect(res.status).toBe(200);
  });
});
