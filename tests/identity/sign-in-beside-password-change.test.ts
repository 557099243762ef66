import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { browserRequest } from '../support/http.ts';
import { authorizeUrl, createFirstPartyClient, followAuthorize, pkcePair } from '../support/oauth.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import { sessionCookie, signIn, signUp } from '../support/users.ts';

/**
 * A sign-in with the old password whose password check overlaps a password change (review 24, finding 1; contract.md,
 * Trust boundaries: "A password reset or change ends every session ... of the user"). The library reads the hash,
 * checks it (scrypt), then inserts the session: a change committing during the check deleted the sessions it saw and
 * not the one inserted just after, which nothing made wait. Here the library's password check of the thief's sign-in is
 * held (the hash already read) while the change runs whole and commits; the session is then refused
 * (functions/auth/sign-in-password-stands.ts). The insert waiting on the change's lock instead is
 * sign-in-races.pg-only.test.ts.
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const sessionsOf = async (userId: string) =>
  (await first<{ n: number }>(t.db, sql`select count(*)::int as n from "session" where "userId" = ${userId}`))!.n;

/**
 * Holds the library's next password check until letGo(): by then the sign-in has read the hash it checks. The check
 * itself is the library's own, run once let go.
 */
async function holdNextPasswordCheck() {
  const password = (await t.deps.auth.$context).password;
  const verify = password.verify;
  let reached!: () => void;
  const isReached = new Promise<void>((resolve) => (reached = resolve));
  let letGo!: () => void;
  const goes = new Promise<void>((resolve) => (letGo = resolve));
  password.verify = async (input) => {
    password.verify = verify;
    reached();
    await goes;
    return verify(input);
  };
  return { reached: isReached, letGo };
}

/** A sign-in whose password check is held until `meanwhile` has run whole. */
async function signInAround(credentials: { email: string; password: string }, meanwhile: () => Promise<void>) {
  const held = await holdNextPasswordCheck();
  const signingIn = t.http.post('/api/auth/sign-in/email', { json: credentials });
  await held.reached;
  try {
    await meanwhile();
  } finally {
    held.letGo();
  }
  return signingIn;
}

describe('a sign-in with the old password while the password changes', () => {
  it("attack: the owner changes the password while a thief's sign-in checks the old one; the thief gets 401 and no session", async () => {
    const owner = await signUp(t);
    let ownersNewCookie = '';
    const thief = await signInAround({ email: owner.email, password: owner.password }, async () => {
      const change = await t.http.post('/api/auth/change-password', {
        cookie: owner.cookie,
        headers: { origin: t.baseUrl },
        json: { currentPassword: owner.password, newPassword: 'the owner new password 1' },
      });
      expect(change.status, change.text).toBe(200);
      ownersNewCookie = sessionCookie(change.headers);
    });
    expect({ status: thief.status, code: thief.body?.code, cookies: thief.headers.getSetCookie() }).toEqual({
      status: 401,
      code: 'INVALID_EMAIL_OR_PASSWORD',
      cookies: [],
    });
    // The one session left is the one change-password gave the owner.
    expect(await sessionsOf(owner.userId)).toBe(1);
    expect((await t.http.get('/me', { cookie: ownersNewCookie })).status).toBe(200);
  });

  it('attack: the owner resets the password by the mailed link while the sign-in checks the old one; no session is left', async () => {
    const owner = await signUp(t);
    expect((await t.http.post('/api/auth/request-password-reset', { json: { email: owner.email } })).status).toBe(200);
    const mail = (await mailsTo(t, owner.email)).find((m) => /reset/i.test(m.subject))!;
    const token = linkIn(mail).pathname.split('/').pop()!;
    const thief = await signInAround({ email: owner.email, password: owner.password }, async () => {
      const reset = await t.http.post('/api/auth/reset-password', { json: { newPassword: 'the reset password 1', token } });
      expect(reset.status, reset.text).toBe(200);
    });
    expect({ status: thief.status, code: thief.body?.code, cookies: thief.headers.getSetCookie() }).toEqual({
      status: 401,
      code: 'INVALID_EMAIL_OR_PASSWORD',
      cookies: [],
    });
    expect(await sessionsOf(owner.userId)).toBe(0);
    // The new password signs in (control).
    expect((await signIn(t, { email: owner.email, password: 'the reset password 1' })).cookie).toBeTruthy();
  });

  // The read-through of this mend: a sign-in carrying an `oauth_query` (any signed-out authorize gives one) ends in the
  // OAuth plugin, which answers 302 with the cookie to a navigation and 200 { redirect, url } to a fetch: the check
  // looked only at a 200 with the token in its body, so the thief kept a session through the change.
  for (const mode of ['navigate', 'cors'] as const) {
    it(`attack: the same with an oauth_query, answered as a ${mode === 'navigate' ? '302' : 'fetch'} by the OAuth plugin: 401, no session left`, async () => {
      const owner = await signUp(t);
      const client = await createFirstPartyClient(t);
      const toSignIn = await followAuthorize(t, authorizeUrl(client, { challenge: pkcePair().challenge }));
      const body = JSON.stringify({ email: owner.email, password: owner.password, oauth_query: toSignIn.search.slice(1) });
      const held = await holdNextPasswordCheck();
      const signingIn = browserRequest(
        t.baseUrl,
        'POST',
        '/api/auth/sign-in/email',
        { 'content-type': 'application/json', origin: t.baseUrl, accept: 'text/html', 'sec-fetch-mode': mode, 'sec-fetch-site': 'same-origin' },
        body,
      );
      await held.reached;
      try {
        const change = await t.http.post('/api/auth/change-password', {
          cookie: owner.cookie,
          headers: { origin: t.baseUrl },
          json: { currentPassword: owner.password, newPassword: 'the owner new password 1' },
        });
        expect(change.status, change.text).toBe(200);
      } finally {
        held.letGo();
      }
      const thief = await signingIn;
      expect({ status: thief.status, cookies: thief.setCookies.filter((c) => /session_token=[^;]/.test(c)) }).toEqual({ status: 401, cookies: [] });
      // only the session change-password gave the owner is left
      expect(await sessionsOf(owner.userId)).toBe(1);
    });
  }

  it('a sign-in held the same way with nothing changed meanwhile keeps its session (control)', async () => {
    const owner = await signUp(t);
    const res = await signInAround({ email: owner.email, password: owner.password }, async () => {});
    expect(res.status, res.text).toBe(200);
    expect((await t.http.get('/me', { cookie: sessionCookie(res.headers) })).status).toBe(200);
  });
});
