import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { MAILS_PER_RECIPIENT_PER_HOUR, SIGN_UP_NOTICES_PER_RECIPIENT_PER_HOUR } from '../../functions/auth/recipient-allowance.ts';
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
  it(`attack: naming one address on every endpoint that mails it sends it ${MAILS_PER_RECIPIENT_PER_HOUR} links and ${SIGN_UP_NOTICES_PER_RECIPIENT_PER_HOUR} "someone signed up" notice an hour, not 90 a minute`, async () => {
    const victim = await signUp(t); // unverified, so send-verification-email mails it too; its sign-up mail counts
    const bystander = await signUp(t);
    const before = (await mailsTo(t, victim.email)).length;
    expect(before).toBe(1);
    const statuses: number[] = [];
    // The library answers an anonymous send-verification-email after 500 ms at the earliest, and we a reset request
    // (so that their time tells nothing): those are sent all at once, beside the rounds of sign-ups.
    const verifications = Array.from({ length: 28 }, () => t.http.post('/api/auth/send-verification-email', { json: { email: victim.email } }));
    const resets = Array.from({ length: 28 }, () => t.http.post('/api/auth/request-password-reset', { json: { email: victim.email } }));
    for (let i = 0; i < 28; i++) {
      statuses.push((await t.http.post('/api/auth/sign-up/email', { json: { email: victim.email, password: `attacker pw ${i}`, name: 'x' } })).status);
    }
    statuses.push(...(await Promise.all([...verifications, ...resets])).map((res) => res.status));
    // Every request is answered as before (nothing tells the asker a mail was held back)...
    expect(statuses.every((s) => s === 200)).toBe(true);
    // ...and the address got its hour's allowances, no more: the links', and the notices' (counted apart, review 33).
    const mailed = await mailsTo(t, victim.email);
    expect(mailed).toHaveLength(MAILS_PER_RECIPIENT_PER_HOUR + SIGN_UP_NOTICES_PER_RECIPIENT_PER_HOUR);
    expect(mailed.filter((m) => /tried to create/.test(m.subject))).toHaveLength(SIGN_UP_NOTICES_PER_RECIPIENT_PER_HOUR);
    // Another address is not affected; an hour later the victim can be mailed again.
    expect((await t.http.post('/api/auth/request-password-reset', { json: { email: bystander.email } })).status).toBe(200);
    expect((await mailsTo(t, bystander.email)).filter((m) => /reset/i.test(m.subject))).toHaveLength(1);
    t.clock.advance(61 * 60 * 1000);
    try {
      expect((await t.http.post('/api/auth/request-password-reset', { json: { email: victim.email } })).status).toBe(200);
      expect(await mailsTo(t, victim.email)).toHaveLength(mailed.length + 1);
    } finally {
      t.clock.set(new Date());
    }
    // The count holds no address.
    expect(await first(t.db, sql`select 1 as found from public.rate_limits where key like ${`%${victim.email}%`}`)).toBeUndefined();
  }, 60_000); // 86 requests
});

describe('account mails per recipient mailbox: its other spellings, and what strangers can spend of it (review 33)', () => {
  // An app of its own, with the per-client-address limits off (the per-recipient allowances are what is shown; the
  // attack above stays within those limits with the same requests a round).
  let m: TestApp;
  beforeAll(async () => {
    m = await startTestApp();
  });
  afterAll(() => m.close());

  /** Every mail to any of these addresses (one mailbox, spelled several ways), oldest first. */
  const mailsToAny = (addresses: string[]) =>
    rows<{ to: string; subject: string }>(m.db, sql`select to_address as "to", subject from mail_outbox
                                                     where lower(to_address) = any(${addresses}::text[]) order by created_at, id`);
  const strangerSignsUp = (email: string) => m.http.post('/api/auth/sign-up/email', { json: { email, password: `stranger pw ${randomUUID()}`, name: 'x' } });
  const askForReset = (email: string) => m.http.post('/api/auth/request-password-reset', { json: { email } });
  const resetMails = async (email: string) => (await mailsTo(m, email)).filter((mail) => /reset/i.test(mail.subject));

  const mailboxes: Array<[string, (i: number, name: string) => string]> = [
    // a +tag, at any domain (RFC 5233; Gmail, Outlook, iCloud, Fastmail and Proton deliver it to the base mailbox)
    ['a +tag at any domain', (i, name) => `${name}+${i}@example.test`],
    // Gmail also ignores dots, and googlemail.com is gmail.com
    ['dots and googlemail.com at Gmail', (i, name) => `${name.slice(0, 1 + (i % 5))}.${name.slice(1 + (i % 5))}${i % 3 ? `+${i}` : ''}@${i % 2 ? 'googlemail.com' : 'gmail.com'}`],
  ];
  for (const [label, spelling] of mailboxes) {
    it(`attack: ${label}: one mailbox under new spellings still gets ${MAILS_PER_RECIPIENT_PER_HOUR} account mails an hour`, async () => {
      // Was: each spelling had an hour of its own; 28 rounds a minute (within the per-client limits) mailed 84.
      const name = `victim${randomUUID().slice(0, 8)}`;
      const addresses = Array.from({ length: 12 }, (_, i) => spelling(i, name).toLowerCase());
      expect(new Set(addresses).size).toBe(addresses.length); // new addresses (new accounts) to the service
      // One account per spelling, one after another (each sign-up mails its new address a link); then a new link and a
      // reset for every spelling, all at once (an anonymous send-verification-email takes the library 500 ms).
      const statuses: number[] = [];
      for (const email of addresses) statuses.push((await strangerSignsUp(email)).status);
      const more = await Promise.all(addresses.flatMap((email) => [m.http.post('/api/auth/send-verification-email', { json: { email } }), askForReset(email)]));
      statuses.push(...more.map((res) => res.status));
      expect(statuses.every((s) => s === 200)).toBe(true);
      const mailed = await mailsToAny(addresses);
      expect(mailed).toHaveLength(MAILS_PER_RECIPIENT_PER_HOUR);
      // Counted by mailbox, nothing else changed: the mails went to the spellings asked for (the first sign-ups' until
      // the allowance ran out; per spelling, each of the 36 requests would have mailed), and each account has the
      // address it was made with.
      expect(new Set(mailed.map((mail) => mail.to.toLowerCase()))).toEqual(new Set(addresses.slice(0, MAILS_PER_RECIPIENT_PER_HOUR)));
      expect(await first(m.db, sql`select count(*)::int as n from "user" where email = any(${addresses}::text[])`)).toEqual({ n: addresses.length });
    });
  }

  it(`attack: a stranger's sign-ups with the owner's address do not hold back the owner's reset: the notice has its own ${SIGN_UP_NOTICES_PER_RECIPIENT_PER_HOUR} an hour`, async () => {
    // Was: the notice came out of the links' pool; ten anonymous sign-ups at the start of each hour, and the owner's
    // reset requests were answered 200 and mailed nothing.
    const owner = await signUp(m, { verified: true }); // its verification mail counts against the links
    for (let i = 0; i < MAILS_PER_RECIPIENT_PER_HOUR; i++) expect((await strangerSignsUp(owner.email)).status).toBe(200);
    expect((await mailsTo(m, owner.email)).filter((mail) => /tried to create/.test(mail.subject))).toHaveLength(SIGN_UP_NOTICES_PER_RECIPIENT_PER_HOUR);
    expect((await askForReset(owner.email)).status).toBe(200);
    expect(await resetMails(owner.email)).toHaveLength(1);
  });

  it("attack: a stranger's sign-ups with the address do not hold back the unverified owner's new verification link", async () => {
    const owner = await signUp(m); // unverified: its first link expired unused, say
    for (let i = 0; i < MAILS_PER_RECIPIENT_PER_HOUR; i++) expect((await strangerSignsUp(owner.email)).status).toBe(200);
    const resend = await m.http.post('/api/auth/send-verification-email', { cookie: owner.cookie, headers: { origin: m.baseUrl }, json: { email: owner.email } });
    expect(resend.status).toBe(200);
    // the sign-up's link and the new one (the test clock stands still: the mails are told apart by kind, not order)
    expect((await mailsTo(m, owner.email)).filter((mail) => /confirm your/i.test(mail.subject))).toHaveLength(2);
  });

  it("attack: a stranger's accounts at other spellings of a confirmed owner's mailbox do not hold back the owner's reset", async () => {
    // Counting by mailbox joined these accounts' links with the owner's; the links to a confirmed address have their
    // own allowance, which only the mailbox's owner's accounts draw on, with reset links that work.
    const owner = await signUp(m, { email: `owner-${randomUUID().slice(0, 8)}@example.test`, verified: true });
    const [local, domain] = owner.email.split('@');
    // Sent at once: each reset request waits out its answer floor, one after another they took 8 s.
    const spellings = Array.from({ length: MAILS_PER_RECIPIENT_PER_HOUR }, (_, i) => `${local}+${i}@${domain}`);
    for (const email of spellings) expect((await strangerSignsUp(email)).status).toBe(200);
    expect((await Promise.all(spellings.map(askForReset))).map((res) => res.status)).toEqual(spellings.map(() => 200));
    expect((await askForReset(owner.email)).status).toBe(200);
    expect(await resetMails(owner.email)).toHaveLength(1);
    // That allowance is the same size: strangers asking for the owner's resets get it mailed that often an hour.
    const more = await Promise.all(Array.from({ length: 2 * MAILS_PER_RECIPIENT_PER_HOUR }, () => askForReset(owner.email)));
    expect(more.map((res) => res.status)).toEqual(more.map(() => 200));
    expect(await resetMails(owner.email)).toHaveLength(MAILS_PER_RECIPIENT_PER_HOUR);
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
