import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';

/**
 * contract.md, Trust boundaries: "Sign-up answers the same for a new and an existing email" (an existing address is
 * answered 200 with a made-up user, and its owner is told by mail). Two sign-ups of one new address at once (a
 * double-clicked form, or a prober racing itself) both passed the library's "exists?" look; the later insert failed on
 * the address's unique key and its caller saw 422 FAILED_TO_CREATE_USER: an answer no sign-up of an existing address
 * gets, and an error for a double-click whose account was made (review 104). (PostgreSQL only: the embedded database
 * runs one statement at a time.)
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ libraryPasswordHashing: true });
});
afterAll(() => t?.close());

describe('sign-up of one new address several times at once', () => {
  it('answers every request 200, as a sign-up of an existing address is answered, and makes one account', async () => {
    const existing = await signUp(t);
    const again = await t.http.post('/api/auth/sign-up/email', { json: { email: existing.email, password: 'pw-12345678-abc-x', name: 'Again' } });
    expect(again.status).toBe(200); // an existing address: 200, as a new one

    const answers: string[] = [];
    const emails: string[] = [];
    for (let round = 0; round < 3; round++) {
      const email = `race-${round}-${Date.now()}@example.com`;
      emails.push(email);
      const sent = await Promise.all(
        Array.from({ length: 4 }, (_, i) => t.http.post('/api/auth/sign-up/email', { json: { email, password: `pw-12345678-abc-${i}`, name: 'Racer' } })),
      );
      for (const a of sent) answers.push(a.status === 200 ? '200' : `${a.status} ${a.text.slice(0, 80)}`);
    }
    expect(answers).toEqual(Array(12).fill('200'));
    for (const email of emails) {
      const accounts = await first<{ n: number }>(t.db, sql`select count(*)::int as n from "user" where lower(email) = ${email}`);
      expect(accounts!.n).toBe(1);
      expect((await mailsTo(t, email)).length).toBeGreaterThanOrEqual(1); // the verification mail at least
    }
  });

  // Review 105: the replay read the address otherwise than the library: a form's media type in capitals was taken for
  // JSON, and of a field named twice it took the first value where the library takes the last.
  for (const [what, contentType, body] of [
    ['an honest form with its media type in capitals', 'Application/X-WWW-Form-Urlencoded', (email: string, i: number) =>
      new URLSearchParams({ email, password: `pw-12345678-abc-${i}`, name: 'Racer' }).toString()],
    ['attack: a form naming the address twice (the library takes the last)', 'application/x-www-form-urlencoded', (email: string, i: number) =>
      `email=${encodeURIComponent(`decoy-${i}-${Date.now()}@example.com`)}&email=${encodeURIComponent(email)}&password=pw-12345678-abc-${i}&name=Racer`],
  ] as const) {
    it(`${what}: every answer 200, one account`, async () => {
      const answers: string[] = [];
      for (let round = 0; round < 3; round++) {
        const email = `race-form-${round}-${Date.now()}@example.com`;
        const sent = await Promise.all(
          Array.from({ length: 4 }, (_, i) => t.http.post('/api/auth/sign-up/email', { body: body(email, i), headers: { 'content-type': contentType } })),
        );
        for (const a of sent) answers.push(a.status === 200 ? '200' : `${a.status} ${a.text.slice(0, 80)}`);
        const accounts = await first<{ n: number }>(t.db, sql`select count(*)::int as n from "user" where lower(email) = ${email}`);
        expect(accounts!.n).toBe(1);
      }
      expect(answers).toEqual(Array(12).fill('200'));
    });
  }
});
