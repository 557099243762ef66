import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { deliverMail, linkIn, mailsTo } from '../support/mail.ts';
import { createOAuthClient, followAuthorize, pkcePair, postForm, authorizeUrl, type TestOAuthClient } from '../support/oauth.ts';
import { sessionCookie } from '../support/users.ts';
import { createLogger, memoryLogger, scrubSecrets } from '../../functions/platform/logger.ts';

/**
 * contract.md, Trust boundaries: "Logs never hold a secret: no password, reset or verification token, client
 * secret, session token or access token, also not inside a logged URL path or query."
 *
 * One account goes through everything that mails or issues a secret, over HTTP, in production mode (where the
 * mail log carries no body): sign-up, the verification mail and its resend, a password reset (request, the mailed
 * link opened, the reset), sign-in, a wrong password, a password change, the OAuth code flow (authorize, consent,
 * code exchange), a refresh, introspection, userinfo, revocation. Every secret that was mailed or issued is
 * collected, then looked for in every log line the app wrote: none may appear.
 */

let t: TestApp;
let client: TestOAuthClient;
const secrets = new Map<string, string>();

function keep(what: string, value: string | null | undefined) {
  expect(value, what).toBeTruthy();
  secrets.set(what, value!);
}

/** A session cookie's value (raw and URL-decoded) and the session token inside it. */
function keepCookie(what: string, cookie: string) {
  for (const pair of cookie.split('; ')) {
    const value = pair.slice(pair.indexOf('=') + 1);
    keep(`${what} cookie`, value);
    const decoded = decodeURIComponent(value);
    keep(`${what} cookie (decoded)`, decoded);
    keep(`${what} session token`, decoded.split('.')[0]);
  }
}

/** The token and every other query value of a mailed link. */
function keepLink(what: string, link: URL) {
  for (const [name, value] of link.searchParams) if (name === 'token') keep(`${what} ${name}`, value);
}

beforeAll(async () => {
  t = await startTestApp({ env: { NODE_ENV: 'production' } });
  client = await createOAuthClient(t, { name: 'Log Probe Agent' });
  keep('client secret', client.clientSecret);
});
afterAll(() => t.close());

describe('no secret in any log line', () => {
  it('a whole account life: sign-up, verification, reset, sign-in, password change, OAuth tokens', async () => {
    const email = `log-probe-${Date.now()}@example.test`;
    const passwords = ['first password 1', 'second password 2', 'third password 3', 'wrong guess password'];
    passwords.forEach((p, i) => keep(`password ${i + 1}`, p));

    // Sign-up, and the verification mail when sign-up sends one (resend too, when the endpoint exists).
    const up = await t.http.post('/api/auth/sign-up/email', { json: { email, password: passwords[0], name: 'Log Probe' } });
    expect(up.status).toBe(200);
    if (typeof up.body?.token === 'string') keep('sign-up session token', up.body.token);
    const resend = await t.http.post('/api/auth/send-verification-email', { json: { email } });
    expect([200, 404]).toContain(resend.status);
    const verificationMails = (await mailsTo(t, email)).filter((m) => /verify-email/.test(m.text));
    for (const [i, mail] of verificationMails.entries()) keepLink(`verification mail ${i + 1}`, linkIn(mail));
    if (verificationMails.length > 0) {
      const link = linkIn(verificationMails[verificationMails.length - 1]!);
      const opened = await t.http.get(link.pathname + link.search);
      expect(opened.status).toBeLessThan(400);
    }

    // Password reset: request, open the mailed link, reset with the token it redirects with.
    const request = await t.http.post('/api/auth/request-password-reset', {
      json: { email, redirectTo: `${t.baseUrl}/reset-password-page` },
    });
    expect(request.status).toBe(200);
    const resetLink = linkIn((await mailsTo(t, email)).find((m) => m.text.includes('/reset-password/'))!);
    expect(resetLink.pathname).toMatch(/^\/api\/auth\/reset-password\/[^/]+$/);
    keep('reset link token', resetLink.pathname.split('/').pop());
    const opened = await t.http.get(resetLink.pathname + resetLink.search);
    expect(opened.status).toBe(302);
    const resetToken = new URL(opened.headers.get('location')!).searchParams.get('token');
    keep('reset token', resetToken);
    expect((await t.http.post('/api/auth/reset-password', { json: { newPassword: passwords[1], token: resetToken } })).status).toBe(200);

    // Sign-in (and a wrong password), then a password change with the session.
    const wrong = await t.http.post('/api/auth/sign-in/email', { json: { email, password: passwords[3] } });
    expect(wrong.status).toBe(401);
    const signIn = await t.http.post('/api/auth/sign-in/email', { json: { email, password: passwords[1] } });
    expect(signIn.status).toBe(200);
    keep('sign-in session token', signIn.body.token);
    let cookie = sessionCookie(signIn.headers);
    keepCookie('sign-in', cookie);
    const change = await t.http.post('/api/auth/change-password', {
      cookie,
      headers: { origin: t.baseUrl },
      json: { currentPassword: passwords[1], newPassword: passwords[2], revokeOtherSessions: true },
    });
    expect(change.status).toBe(200);
    if (change.headers.getSetCookie().length > 0) {
      cookie = sessionCookie(change.headers);
      keepCookie('after password change', cookie);
    }
    if (typeof change.body?.token === 'string') keep('password change session token', change.body.token);
    const again = await t.http.post('/api/auth/sign-in/email', { json: { email, password: passwords[2] } });
    expect(again.status).toBe(200);
    cookie = sessionCookie(again.headers);
    keepCookie('second sign-in', cookie);

    // OAuth: authorize, consent, code exchange, a call with the token, refresh, introspection, userinfo, revocation.
    const { verifier, challenge } = pkcePair();
    keep('PKCE verifier', verifier);
    const state = `state-${crypto.randomUUID()}`;
    keep('state', state);
    let landing = await followAuthorize(t, authorizeUrl(client, { challenge, state }), cookie);
    expect(landing.pathname).toBe('/consent');
    keep('consent code', landing.searchParams.get('consent_code'));
    const consent = await t.http.post('/api/auth/oauth2/consent', {
      cookie,
      headers: { origin: t.baseUrl },
      json: { accept: true, consent_code: landing.searchParams.get('consent_code') },
    });
    expect(consent.status).toBe(200);
    landing = new URL(consent.body.url);
    // The browser lands back at the agent with the code; a stray hop through the service must not log it either.
    const code = landing.searchParams.get('code');
    keep('authorization code', code);
    expect((await t.http.get(`/callback-probe?code=${code}&state=${state}`)).status).toBe(404);
    const token = await postForm(t, '/api/auth/oauth2/token', client, {
      grant_type: 'authorization_code',
      code: code!,
      redirect_uri: client.redirectUri,
      code_verifier: verifier,
    });
    expect(token.status).toBe(200);
    keep('access token', token.body.access_token);
    keep('refresh token', token.body.refresh_token);
    keep('id token', token.body.id_token);
    expect((await t.http.get('/me', { bearer: token.body.access_token })).status).toBe(200);
    const refreshed = await postForm(t, '/api/auth/oauth2/token', client, {
      grant_type: 'refresh_token',
      refresh_token: token.body.refresh_token,
    });
    expect(refreshed.status).toBe(200);
    keep('refreshed access token', refreshed.body.access_token);
    keep('rotated refresh token', refreshed.body.refresh_token);
    expect((await postForm(t, '/api/auth/oauth2/introspect', client, { token: refreshed.body.access_token })).status).toBe(200);
    expect((await t.http.get('/api/auth/oauth2/userinfo', { bearer: refreshed.body.access_token })).status).toBe(200);
    const revoke = await postForm(t, '/api/auth/oauth2/revoke', client, {
      token: refreshed.body.refresh_token,
      token_type_hint: 'refresh_token',
    });
    expect(revoke.status).toBe(200);
    // A token sent where it does not belong (query string) and a forged bearer: refused, and not logged either.
    expect((await t.http.get(`/me?access_token=${refreshed.body.access_token}`)).status).toBe(401);

    // Mail delivery without SMTP logs the mails (production: recipient and subject only).
    await deliverMail(t);

    const lines = t.logs.map((line) => JSON.stringify(line));
    expect(lines.length).toBeGreaterThan(20);
    const leaks = [...secrets].flatMap(([what, value]) =>
      lines.filter((line) => line.includes(value) || line.includes(encodeURIComponent(value))).map((line) => `${what}: ${line}`),
    );
    expect(leaks).toEqual([]);

    // The request lines still say what happened: the library's route pattern, the path without the token.
    const resetLine = t.logs.find((l) => l.msg === 'request' && l.method === 'GET' && String(l.route).includes('reset-password'));
    expect(resetLine).toMatchObject({ route: '/api/auth/reset-password/:token', path: '/api/auth/reset-password/:token', query: ['callbackURL'], status: 302 });
    expect(t.logs.find((l) => l.msg === 'request' && l.route === '/api/auth/sign-in/email' && l.status === 401)).toBeDefined();
  });
});

describe('the logger refuses obvious secrets whatever a caller hands it', () => {
  it('fields named for a secret, at any depth, and secrets recognisable in text', () => {
    const log = memoryLogger();
    const jwt = 'eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ';
    log.info('probe', {
      password: 'hunter2hunter2',
      nested: { clientSecret: 'cs-0123456789', headers: { authorization: 'Basic dXNlcjpwYXNz', cookie: 'a=b' } },
      accessToken: 'opaque-access-token-value',
      url: 'https://app.example/api/auth/verify-email?token=verif-token-123&callbackURL=%2F',
      link: 'https://app.example/api/auth/reset-password/resetTok3n0123?callbackURL=x',
      header: `Bearer ${jwt}`,
      bare: `saw ${jwt} in a message`,
      cookieHeader: 'better-auth.session_token=sess-token.sig%3D; other=1',
      err: new Error(`refused code=abc123xyz for state=st4te`),
      keep: { userId: 'u-1', tokenCount: 3 },
    });
    const line = JSON.stringify(log.lines[0]);
    for (const secret of ['hunter2', 'cs-0123', 'dXNlcjpwYXNz', 'opaque-access', 'verif-token', 'resetTok3n', jwt, 'sess-token', 'abc123xyz', 'st4te']) {
      expect(line).not.toContain(secret);
    }
    expect(log.lines[0]).toMatchObject({ keep: { userId: 'u-1', tokenCount: 3 }, password: '[redacted]' });
    expect(scrubSecrets('/api/auth/reset-password/:token')).toBe('/api/auth/reset-password/:token');
    expect(scrubSecrets('plain text, no secret')).toBe('plain text, no secret');
  });

  it('writes the same line format as before (time, level, msg, fields)', () => {
    const written: string[] = [];
    createLogger({ write: (line) => written.push(line) }).info('hello', { requestId: 'r-1', status: 200 });
    expect(JSON.parse(written[0]!)).toMatchObject({ level: 'info', msg: 'hello', requestId: 'r-1', status: 200 });
  });
});
