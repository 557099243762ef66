import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertAgent, insertTier } from '../support/fixtures.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import { createAdmin, signIn, signUp } from '../support/users.ts';

/** Email/password sign-up, sign-in, sign-out, get-session and GET /me over HTTP, with the cookie they set. */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const setsSessionCookie = (headers: Headers) => headers.getSetCookie().some((c) => /session_token=[^;]/.test(c));

const signupInteractions = (userId: string) =>
  rows<{ n: number }>(t.db, sql`select count(*)::int as n from interactions where type = 'user_signup' and user_id = ${userId}`).then(
    (r) => r[0]!.n,
  );

describe('POST /api/auth/sign-up/email', () => {
  it('creates the user without signing in, mails a verification link and writes exactly one user_signup interaction', async () => {
    const res = await t.http.post('/api/auth/sign-up/email', { json: { email: 'Ada@Example.test', password: 'correct horse', name: 'Ada' } });
    expect(res.status).toBe(200);
    expect(res.body.token).toBeNull();
    expect(res.body.user).toMatchObject({ email: 'ada@example.test', name: 'Ada', role: 'user', emailVerified: false });
    expect(setsSessionCookie(res.headers)).toBe(false);
    expect(await signupInteractions(res.body.user.id)).toBe(1);
    const [interaction] = await rows<{ metadata: { email: string } }>(
      t.db,
      sql`select metadata from interactions where user_id = ${res.body.user.id}`,
    );
    expect(interaction!.metadata.email).toBe('ada@example.test');

    // Signing in works before the address is verified (the contract does not require it); the session says so.
    const ada = await signIn(t, { email: 'ada@example.test', password: 'correct horse' });
    expect(ada.userId).toBe(res.body.user.id);
    expect((await t.http.get('/me', { cookie: ada.cookie })).body.data).toMatchObject({ id: ada.userId, role: 'user', banned: false });
    expect((await t.http.get('/api/auth/get-session', { cookie: ada.cookie })).body.user.emailVerified).toBe(false);

    const [mail] = await mailsTo(t, 'ada@example.test');
    expect(mail!.subject).toBe('Confirm your Agent Marketplace email address');
    const link = linkIn(mail!);
    expect(link.pathname).toBe('/api/auth/verify-email');
    expect(link.searchParams.get('token')).toBeTruthy();
    // Followed in a browser signed in to the account, the link verifies the address and lands on the sign-in page
    // (the service's own without FRONTEND_URL).
    const verified = await t.http.get(link.pathname + link.search, { cookie: ada.cookie });
    expect(verified.status).toBe(302);
    expect(verified.headers.get('location')).toBe(`${t.baseUrl}/sign-in?verified=true`);
    expect((await t.http.get('/sign-in?verified=true')).status).toBe(200);
    expect((await t.http.get('/api/auth/get-session', { cookie: ada.cookie })).body.user.emailVerified).toBe(true);
  });

  it('answers an address that already has an account exactly like a new one, and mails its owner instead', async () => {
    const owner = await signUp(t, { name: 'Owner' });
    const mailsBefore = new Set((await mailsTo(t, owner.email)).map((m) => m.id));
    const fresh = await t.http.post('/api/auth/sign-up/email', {
      json: { email: `fresh-${Date.now()}@example.test`, password: 'attacker password', name: 'Probe' },
    });
    const taken = await t.http.post('/api/auth/sign-up/email', { json: { email: owner.email, password: 'attacker password', name: 'Probe' } });

    // Same status, same body shape, no session cookie either way: the answer does not tell whether the address has an account.
    expect(taken.status).toBe(fresh.status);
    expect(taken.status).toBe(200);
    expect(Object.keys(taken.body).sort()).toEqual(Object.keys(fresh.body).sort());
    expect(Object.keys(taken.body.user).sort()).toEqual(Object.keys(fresh.body.user).sort());
    expect(taken.body).toMatchObject({ token: null, user: { email: owner.email, name: 'Probe', emailVerified: false, role: 'user' } });
    expect(taken.body.user.id).not.toBe(owner.userId);
    expect(setsSessionCookie(fresh.headers)).toBe(false);
    expect(setsSessionCookie(taken.headers)).toBe(false);
    expect(taken.headers.getSetCookie()).toEqual(fresh.headers.getSetCookie());

    // Nothing changed on the account: one user, one user_signup row, the owner's password still the one that works.
    const [{ n }] = (await rows<{ n: number }>(t.db, sql`select count(*)::int as n from "user" where email = ${owner.email}`)) as [{ n: number }];
    expect(n).toBe(1);
    expect(await signupInteractions(owner.userId)).toBe(1);
    expect((await t.http.post('/api/auth/sign-in/email', { json: { email: owner.email, password: 'attacker password' } })).status).toBe(401);
    expect((await signIn(t, owner)).userId).toBe(owner.userId);

    // The owner hears about it (and gets no verification link for someone else's attempt).
    const mails = (await mailsTo(t, owner.email)).filter((m) => !mailsBefore.has(m.id));
    expect(mails.map((m) => m.subject)).toEqual(['Someone tried to create an Agent Marketplace account with your address']);
    expect(mails[0]!.text).toContain(`${t.baseUrl}/sign-in`);
    expect(mails[0]!.text).not.toContain('verify-email');
  });

  it('the user_signup row cannot be written twice for one user, whoever writes it', async () => {
    const user = await signUp(t);
    await sql`insert into interactions (type, user_id) values ('user_signup', ${user.userId})
              on conflict (user_id) where type = 'user_signup' do nothing`.execute(t.db);
    await expect(sql`insert into interactions (type, user_id) values ('user_signup', ${user.userId})`.execute(t.db)).rejects.toMatchObject({
      code: '23505',
    });
    expect(await signupInteractions(user.userId)).toBe(1);
  });

  it('rejects a short password and a malformed email, creating nothing', async () => {
    const short = await t.http.post('/api/auth/sign-up/email', { json: { email: 'short@example.test', password: 'short', name: 'S' } });
    expect(short.status).toBe(400);
    expect(short.body.code).toBe('PASSWORD_TOO_SHORT');
    const bad = await t.http.post('/api/auth/sign-up/email', { json: { email: 'not-an-email', password: 'long enough pw', name: 'B' } });
    expect(bad.status).toBe(400);
    const [{ n }] = (await rows<{ n: number }>(
      t.db,
      sql`select count(*)::int as n from "user" where email in ('short@example.test', 'not-an-email')`,
    )) as [{ n: number }];
    expect(n).toBe(0);
  });
});

describe('email verification', () => {
  const resend = (email: string, headers: Record<string, string> = {}) =>
    t.http.post('/api/auth/send-verification-email', { json: { email }, headers });

  it('POST /api/auth/send-verification-email mails a new link to an unverified address, and answers the same for any other', async () => {
    const user = await signUp(t);
    const before = new Set((await mailsTo(t, user.email)).map((m) => m.id));
    const res = await resend(user.email);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: true });
    const added = (await mailsTo(t, user.email)).filter((m) => !before.has(m.id));
    expect(added).toHaveLength(1);
    const link = linkIn(added[0]!);
    expect(link.pathname).toBe('/api/auth/verify-email');

    // Unknown and already verified addresses: the same answer, and no mail.
    const unknown = await resend('nobody-here@example.test');
    expect(unknown.status).toBe(200);
    expect(unknown.body).toEqual({ status: true });
    expect(await mailsTo(t, 'nobody-here@example.test')).toEqual([]);
    expect((await t.http.get(link.pathname + link.search, { cookie: user.cookie })).status).toBe(302);
    const verifiedCount = (await mailsTo(t, user.email)).length;
    expect((await resend(user.email)).body).toEqual({ status: true });
    expect(await mailsTo(t, user.email)).toHaveLength(verifiedCount);
  });

  it("attack: an account made with someone else's address is not verified by the owner's click, and the owner gets it by a reset", async () => {
    // Anyone may sign up with an address that is not theirs (unverified, their own password, a session kept).
    const victimEmail = `victim-${Date.now()}@example.test`;
    const attacker = await signUp(t, { email: victimEmail, password: 'attacker chose this' });
    const owner = await signUp(t, { verified: true, name: 'Owner' });
    const asOwner = { cookie: owner.cookie, headers: { origin: t.baseUrl } };
    const org = await t.http.post('/api/auth/organization/create', { ...asOwner, json: { name: 'Acme', slug: `acme-${Date.now()}` } });
    const invitation = await t.http.post('/api/auth/organization/invite-member', {
      ...asOwner,
      json: { email: victimEmail, role: 'admin', organizationId: org.body.id },
    });
    expect(invitation.status, invitation.text).toBe(200);
    const accept = () =>
      t.http.post('/api/auth/organization/accept-invitation', {
        cookie: attacker.cookie,
        headers: { origin: t.baseUrl },
        json: { invitationId: invitation.body.id },
      });

    // The address's owner asks for the confirmation mail and clicks it, signed out: nothing is verified.
    expect((await resend(victimEmail)).status).toBe(200);
    const link = linkIn((await mailsTo(t, victimEmail)).filter((m) => /Confirm/.test(m.subject)).pop()!);
    const clicked = await t.http.get(link.pathname + link.search);
    expect(clicked.status).toBe(302);
    const askedToSignIn = new URL(clicked.headers.get('location')!).searchParams;
    expect(askedToSignIn.get('error')).toBe('SIGN_IN_TO_VERIFY');
    expect(askedToSignIn.has('verified')).toBe(false); // the mail's verified=true is not beside the refusal (review 101)
    // and the 302 is an answer /openapi.json lists for the link
    const verifyEmail = (await t.http.get('/openapi.json')).body.paths['/api/auth/verify-email'].get;
    expect(Object.keys(verifyEmail.responses)).toContain('302');
    expect((await accept()).status).toBe(403);
    expect((await rows(t.db, sql`select 1 from member where "organizationId" = ${org.body.id} and "userId" = ${attacker.userId}`))).toEqual([]);

    // The owner cannot sign in with a password someone else chose: "forgot password". The reset proves the mailbox,
    // verifies the address and ends the attacker's session.
    expect((await t.http.post('/api/auth/request-password-reset', { json: { email: victimEmail, redirectTo: `${t.baseUrl}/reset` } })).status).toBe(200);
    const resetLink = linkIn((await mailsTo(t, victimEmail)).find((m) => /reset/i.test(m.subject))!);
    const token = new URL((await t.http.get(resetLink.pathname + resetLink.search)).headers.get('location')!).searchParams.get('token')!;
    expect((await t.http.post('/api/auth/reset-password', { json: { newPassword: 'the owner chose this', token } })).status).toBe(200);
    expect((await accept()).status).toBe(401);
    const ownerNow = await signIn(t, { email: victimEmail, password: 'the owner chose this' });
    expect((await t.http.get('/api/auth/get-session', { cookie: ownerNow.cookie })).body.user.emailVerified).toBe(true);
    expect((await t.http.post('/api/auth/sign-in/email', { json: { email: victimEmail, password: 'attacker chose this' } })).status).toBe(401);
  });

  it('a link stripped of its callbackURL verifies nothing signed out either (401 SIGN_IN_TO_VERIFY); signed in, it does', async () => {
    const user = await signUp(t);
    const link = linkIn((await mailsTo(t, user.email))[0]!);
    const bare = `${link.pathname}?token=${encodeURIComponent(link.searchParams.get('token')!)}`;
    const signedOut = await t.http.get(bare);
    expect({ status: signedOut.status, code: signedOut.body.code }).toEqual({ status: 401, code: 'SIGN_IN_TO_VERIFY' });
    expect((await t.http.get('/api/auth/get-session', { cookie: user.cookie })).body.user.emailVerified).toBe(false);
    expect((await t.http.get(bare, { cookie: user.cookie })).status).toBe(200);
    expect((await t.http.get('/api/auth/get-session', { cookie: user.cookie })).body.user.emailVerified).toBe(true);
  });

  it('the built-in sign-in page opens the verification link again once signed in', async () => {
    const user = await signUp(t);
    const link = linkIn((await mailsTo(t, user.email))[0]!);
    const askSignIn = new URL((await t.http.get(link.pathname + link.search)).headers.get('location')!);
    expect(`${askSignIn.origin}${askSignIn.pathname}`).toBe(`${t.baseUrl}/sign-in`);
    const page = await t.http.get(askSignIn.pathname + askSignIn.search);
    expect(page.text).toContain('Sign in to confirm your email address.');
    expect(page.text).toContain(`data-continue="${(link.pathname + link.search).replaceAll('&', '&amp;')}"`);
    // Only a verification link of ours is continued to.
    const elsewhere = await t.http.get(`/sign-in?verify=${encodeURIComponent('https://evil.example/x')}`);
    expect(elsewhere.text).toContain('data-continue=""');
  });

  it('a forged or altered token verifies nothing', async () => {
    const user = await signUp(t);
    const link = linkIn((await mailsTo(t, user.email))[0]!);
    const token = link.searchParams.get('token')!;
    const altered = `${token.slice(0, -2)}${token.endsWith('AA') ? 'BB' : 'AA'}`;
    const callback = link.searchParams.get('callbackURL')!;
    const res = await t.http.get(`/api/auth/verify-email?token=${encodeURIComponent(altered)}&callbackURL=${encodeURIComponent(callback)}`);
    expect(res.status).toBe(302);
    expect(new URL(res.headers.get('location')!).searchParams.get('error')).toBe('INVALID_TOKEN');
    expect((await t.http.get('/api/auth/verify-email?token=not-a-token')).status).toBe(401);
    // A real token cannot send the browser to another site afterwards.
    const elsewhere = await t.http.get(`/api/auth/verify-email?token=${encodeURIComponent(token)}&callbackURL=${encodeURIComponent('https://evil.example/')}`);
    expect(elsewhere.status).toBe(403);
    const session = await t.http.get('/api/auth/get-session', { cookie: user.cookie });
    expect(session.body.user.emailVerified).toBe(false);
  });

  it('with a FRONTEND_URL the verification link lands on the front end\'s sign-in page', async () => {
    const withFrontEnd = await startTestApp({ env: { FRONTEND_URL: 'http://127.0.0.1:5173' } });
    try {
      const email = `fe-${Date.now()}@example.test`;
      expect((await withFrontEnd.http.post('/api/auth/sign-up/email', { json: { email, password: 'front end pw', name: 'F' } })).status).toBe(200);
      const link = linkIn((await mailsTo(withFrontEnd, email))[0]!);
      expect(link.origin).toBe(withFrontEnd.baseUrl);
      // Signed out, the front end's sign-in page is told to sign the user in and open the link again.
      const signedOut = await withFrontEnd.http.get(link.pathname + link.search);
      expect(signedOut.status).toBe(302);
      const askSignIn = new URL(signedOut.headers.get('location')!);
      expect(`${askSignIn.origin}${askSignIn.pathname}`).toBe('http://127.0.0.1:5173/sign-in');
      expect(askSignIn.searchParams.get('error')).toBe('SIGN_IN_TO_VERIFY');
      expect(askSignIn.searchParams.get('verify')).toBe(link.pathname + link.search);
      const verifiedRow = () =>
        rows<{ verified: boolean }>(withFrontEnd.db, sql`select "emailVerified" as verified from "user" where email = ${email}`);
      expect((await verifiedRow())[0]!.verified).toBe(false);
      const signedIn = await signIn(withFrontEnd, { email, password: 'front end pw' });
      const res = await withFrontEnd.http.get(askSignIn.searchParams.get('verify')!, { cookie: signedIn.cookie });
      expect(res.status).toBe(302);
      expect(res.headers.get('location')).toBe('http://127.0.0.1:5173/sign-in?verified=true');
      expect((await verifiedRow())[0]!.verified).toBe(true);
    } finally {
      await withFrontEnd.close();
    }
  });

  it('resending is limited per client IP (429 RATE_LIMITED with Retry-After)', async () => {
    const limited = await startTestApp({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '2' } });
    try {
      const statuses: number[] = [];
      let last;
      for (let i = 0; i < 3; i++) {
        last = await limited.http.post('/api/auth/send-verification-email', { json: { email: `rl-${i}@example.test` } });
        statuses.push(last.status);
      }
      expect(statuses).toEqual([200, 200, 429]);
      expect(last!.body.error.code).toBe('RATE_LIMITED');
      expect(Number(last!.headers.get('retry-after'))).toBeGreaterThan(0);
    } finally {
      await limited.close();
    }
  });
});

describe('POST /api/auth/sign-in/email', () => {
  it('signs in with the right password and sets an HttpOnly, SameSite=Lax session cookie (development, http)', async () => {
    const user = await signUp(t);
    const res = await t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password: user.password } });
    expect(res.status).toBe(200);
    const setCookie = res.headers.getSetCookie().find((c) => c.startsWith('better-auth.session_token='))!;
    expect(setCookie).toBeDefined();
    expect(setCookie).toMatch(/; HttpOnly/i);
    expect(setCookie).toMatch(/; SameSite=Lax/i);
    expect(setCookie).not.toMatch(/; Secure/i);
  });

  it('works without an Origin header even when the client sends fetch metadata (agent backends are not browsers)', async () => {
    const user = await signUp(t);
    const res = await t.http.post('/api/auth/sign-in/email', {
      json: { email: user.email, password: user.password },
      headers: { 'sec-fetch-mode': 'cors', 'sec-fetch-site': 'same-origin', 'sec-fetch-dest': 'empty' },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.user.id).toBe(user.userId);
  });

  it('treats an empty Cookie header as no cookie: a server-side sign-in with an empty cookie jar works without an Origin', async () => {
    const user = await signUp(t);
    const res = await t.http.post('/api/auth/sign-in/email', {
      json: { email: user.email, password: user.password },
      headers: { cookie: '', 'sec-fetch-mode': 'cors' },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.user.id).toBe(user.userId);
  });

  it('refuses a cookie-carrying POST without an Origin, and the 403 names the cookie as the cause', async () => {
    const user = await signUp(t);
    const res = await t.http.post('/api/auth/sign-in/email', {
      json: { email: user.email, password: user.password },
      headers: { cookie: user.cookie },
    });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('MISSING_OR_NULL_ORIGIN');
    expect(res.body.message).toMatch(/carries a Cookie header.*Origin header of a trusted origin/);
  });

  it('refuses a browser sign-in posted from an untrusted origin', async () => {
    const user = await signUp(t);
    const res = await t.http.post('/api/auth/sign-in/email', {
      json: { email: user.email, password: user.password },
      headers: { origin: 'https://evil.example', 'sec-fetch-mode': 'cors', 'sec-fetch-site': 'cross-site' },
    });
    expect(res.status).toBe(403);
  });

  it('answers 401 for a wrong password and for an unknown email, without a cookie', async () => {
    const user = await signUp(t);
    const wrong = await t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password: 'not the password' } });
    expect(wrong.status).toBe(401);
    expect(wrong.body.code).toBe('INVALID_EMAIL_OR_PASSWORD');
    expect(wrong.headers.getSetCookie().some((c) => /session_token=[^;]/.test(c))).toBe(false);
    const unknown = await t.http.post('/api/auth/sign-in/email', { json: { email: 'nobody@example.test', password: 'whatever1' } });
    expect(unknown.status).toBe(401);
  });
});

describe('GET /api/auth/get-session and POST /api/auth/sign-out', () => {
  it('returns the session and user for the cookie, and null without one', async () => {
    const user = await signUp(t);
    const res = await t.http.get('/api/auth/get-session', { cookie: user.cookie });
    expect(res.status).toBe(200);
    expect(res.body.user).toMatchObject({ id: user.userId, email: user.email });
    expect(res.body.session.userId).toBe(user.userId);
    const anonymous = await t.http.get('/api/auth/get-session');
    expect(anonymous.status).toBe(200);
    expect(anonymous.body).toBeNull();
  });

  it('sign-out ends the session: the old cookie then gets 401 on /me', async () => {
    const user = await signUp(t);
    const out = await t.http.post('/api/auth/sign-out', { cookie: user.cookie, headers: { origin: t.baseUrl } });
    expect(out.status).toBe(200);
    const me = await t.http.get('/me', { cookie: user.cookie });
    expect(me.status).toBe(401);
    expect(me.body.error.code).toBe('UNAUTHORIZED');
  });

  it('a sign-out whose session the database does not delete answers 503 and keeps the cookie; sent again, it ends the session', async () => {
    const user = await signUp(t);
    const sessionId = (await t.http.get('/api/auth/get-session', { cookie: user.cookie })).body.session.id as string;
    // A real refusal by the database, of this one session's delete (a failing disk, a lock timeout, a lost connection).
    await sql`create function refuse_one_session_delete() returns trigger language plpgsql as $$
      begin if old.id = ${sql.raw(`'${sessionId}'`)} then raise exception 'the disk is full'; end if; return old; end $$`.execute(t.db);
    await sql`create trigger refuse_session_delete before delete on "session" for each row execute function refuse_one_session_delete()`.execute(t.db);
    try {
      const out = await t.http.post('/api/auth/sign-out', { cookie: user.cookie, headers: { origin: t.baseUrl } });
      expect({ status: out.status, code: out.body.error?.code, reason: out.body.error?.details?.reason }).toEqual({
        status: 503,
        code: 'UNAVAILABLE',
        reason: 'session_not_ended',
      });
      expect(out.headers.get('retry-after')).toBe('1');
      expect(out.headers.getSetCookie().some((c) => /session_token=;/.test(c) || /Max-Age=0/i.test(c))).toBe(false);
      expect((await t.http.get('/me', { cookie: user.cookie })).status).toBe(200);
    } finally {
      await sql`drop trigger refuse_session_delete on "session"`.execute(t.db);
      await sql`drop function refuse_one_session_delete()`.execute(t.db);
    }
    const again = await t.http.post('/api/auth/sign-out', { cookie: user.cookie, headers: { origin: t.baseUrl } });
    expect(again.status).toBe(200);
    expect((await t.http.get('/me', { cookie: user.cookie })).status).toBe(401);
  });

  it('a cookie-carrying sign-out from another origin is refused and the session survives', async () => {
    const user = await signUp(t);
    const out = await t.http.post('/api/auth/sign-out', { cookie: user.cookie, headers: { origin: 'https://evil.example' } });
    expect(out.status).toBe(403);
    expect((await t.http.get('/me', { cookie: user.cookie })).status).toBe(200);
  });
});

describe('GET /me', () => {
  it('answers the signed-in user', async () => {
    const user = await signUp(t, { name: 'Grace' });
    const res = await t.http.get('/me', { cookie: user.cookie });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      status: 'success',
      error: null,
      data: { id: user.userId, email: user.email, name: 'Grace', role: 'user', banned: false, createdAt: expect.any(String) },
    });
    expect(new Date(res.body.data.createdAt).toISOString()).toBe(res.body.data.createdAt);
  });

  it('shows the platform_admin role', async () => {
    const admin = await createAdmin(t);
    expect((await t.http.get('/me', { cookie: admin.cookie })).body.data.role).toBe('platform_admin');
  });

  it('answers 401 with sign-in and sign-up URLs when anonymous', async () => {
    const res = await t.http.get('/me');
    expect(res.status).toBe(401);
    expect(res.body).toMatchObject({
      status: 'error',
      data: null,
      error: { code: 'UNAUTHORIZED', details: { signInUrl: `${t.baseUrl}/sign-in`, signUpUrl: `${t.baseUrl}/sign-up` } },
    });
  });

  it('answers 401 for a forged or unknown session cookie', async () => {
    const res = await t.http.get('/me', { cookie: 'better-auth.session_token=forged.value' });
    expect(res.status).toBe(401);
    expect(res.body.error.details.signInUrl).toBe(`${t.baseUrl}/sign-in`);
  });

  it('a second sign-in gives a second, independent session', async () => {
    const user = await signUp(t);
    const again = await signIn(t, user);
    expect(again.cookie).not.toBe(user.cookie);
    expect((await t.http.get('/me', { cookie: again.cookie })).status).toBe(200);
    expect((await t.http.get('/me', { cookie: user.cookie })).status).toBe(200);
  });

  it('a real session token with a wrong signature is refused', async () => {
    const user = await signUp(t);
    const [name, value] = user.cookie.split('=') as [string, string];
    const token = decodeURIComponent(value).split('.')[0]!;
    const forged = `${name}=${encodeURIComponent(`${token}.${'A'.repeat(43)}=`)}`;
    expect((await t.http.get('/me', { cookie: forged })).status).toBe(401);
  });

  it('an expired session is refused', async () => {
    const user = await signUp(t);
    await sql`update session set "expiresAt" = now() - interval '1 second' where "userId" = ${user.userId}`.execute(t.db);
    expect((await t.http.get('/me', { cookie: user.cookie })).status).toBe(401);
  });

  it('an active session slides: after a day of use the next request extends it by the full week', async () => {
    const user = await signUp(t);
    // As if the session had been last extended a day and a minute ago.
    await sql`update session set "expiresAt" = now() + interval '6 days' - interval '1 minute' where "userId" = ${user.userId}`.execute(t.db);
    expect((await t.http.get('/me', { cookie: user.cookie })).status).toBe(200);
    const [row] = await rows<{ days: number }>(
      t.db,
      sql`select extract(epoch from ("expiresAt" - now())) / 86400 as days from session where "userId" = ${user.userId}`,
    );
    expect(Number(row!.days)).toBeGreaterThan(6.9);
  });

  it('a stale session cookie makes a public route anonymous instead of failing it', async () => {
    const user = await signUp(t);
    await t.http.post('/api/auth/sign-out', { cookie: user.cookie, headers: { origin: t.baseUrl } });
    const agent = await insertAgent(t.db, { status: 'active' });
    const tier = await insertTier(t.db, agent.id);
    const res = await t.http.get(`/agents/${agent.id}/pricing/${tier.id}/quotas`, { cookie: user.cookie });
    expect(res.status).toBe(200);
    expect((await t.http.get('/me', { cookie: user.cookie })).status).toBe(401);
  });
});

