import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { deliverMail, linkIn, mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';

/**
 * Password reset end to end: request -> mail in the outbox -> the emailed link -> redirect with the token ->
 * reset -> sign in with the new password. Without SMTP_URL the mail is logged and kept in the outbox.
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

/** The reset mail to an address (sign-up also mails a verification link there). */
async function resetMailTo(app: TestApp, email: string) {
  const mail = (await mailsTo(app, email)).find((m) => /reset/i.test(m.subject));
  if (!mail) throw new Error(`no reset mail to ${email}`);
  return mail;
}

describe('password reset', () => {
  it('mails a link whose token sets a new password; old password and old sessions stop working', async () => {
    const user = await signUp(t);
    const redirectTo = `${t.baseUrl}/reset-password-page`;
    const req = await t.http.post('/api/auth/request-password-reset', { json: { email: user.email, redirectTo } });
    expect(req.status).toBe(200);

    const mail = await resetMailTo(t, user.email);
    expect(mail.subject).toMatch(/reset/i);
    expect(mail.status).toBe('pending');
    expect(await deliverMail(t)).toBeGreaterThanOrEqual(1);
    expect((await resetMailTo(t, user.email)).status).toBe('logged');
    const link = linkIn(mail);
    const linkToken = link.pathname.split('/').pop()!;
    // Outside production the logged line carries the body, but never the secret in it (the link is in the outbox).
    const logged = t.logs.find((l) => l.to === user.email && /reset/i.test(String(l.subject)));
    expect(logged?.text).toContain('/reset-password/[redacted]');
    expect(JSON.stringify(t.logs)).not.toContain(linkToken);

    expect(link.origin).toBe(t.baseUrl);
    const opened = await t.http.get(link.pathname + link.search);
    expect(opened.status).toBe(302);
    const landing = new URL(opened.headers.get('location')!);
    expect(landing.origin + landing.pathname).toBe(redirectTo);
    const token = landing.searchParams.get('token')!;
    expect(token).toBeTruthy();

    const reset = await t.http.post('/api/auth/reset-password', { json: { newPassword: 'brand new password', token } });
    expect(reset.status).toBe(200);

    const oldPw = await t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password: user.password } });
    expect(oldPw.status).toBe(401);
    const newPw = await t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password: 'brand new password' } });
    expect(newPw.status).toBe(200);
    expect((await t.http.get('/me', { cookie: user.cookie })).status).toBe(401);

    const reuse = await t.http.post('/api/auth/reset-password', { json: { newPassword: 'another password', token } });
    expect(reuse.status).toBe(400);
    // Opening the link and resetting wrote request lines: none holds the token.
    expect(JSON.stringify(t.logs)).not.toContain(token);
    expect(JSON.stringify(t.logs)).not.toContain(linkToken);
  });

  it('answers 200 for an unknown email without sending anything (no account enumeration)', async () => {
    const res = await t.http.post('/api/auth/request-password-reset', {
      json: { email: 'nobody-here@example.test', redirectTo: `${t.baseUrl}/reset` },
    });
    expect(res.status).toBe(200);
    expect(await mailsTo(t, 'nobody-here@example.test')).toEqual([]);
  });

  it('rejects an invalid token and a redirect to an untrusted origin', async () => {
    const bad = await t.http.post('/api/auth/reset-password', { json: { newPassword: 'whatever pw 1', token: 'forged' } });
    expect(bad.status).toBe(400);
    const user = await signUp(t);
    const evil = await t.http.post('/api/auth/request-password-reset', {
      json: { email: user.email, redirectTo: 'https://evil.example/steal' },
      headers: { origin: t.baseUrl },
    });
    expect(evil.status).toBe(403);
    expect((await mailsTo(t, user.email)).filter((m) => /reset/i.test(m.subject))).toEqual([]);
  });
});

describe('mail in production without SMTP', () => {
  it('logs recipient and subject but never the body, nor the link once it is opened (reset links stay in the outbox only)', async () => {
    const prod = await startTestApp({ env: { NODE_ENV: 'production', PUBLIC_BASE_URL: 'https://api.market.example' } });
    try {
      const email = 'prod-user@example.test';
      const up = await prod.http.post('/api/auth/sign-up/email', { json: { email, password: 'prod password', name: 'P' } });
      expect(up.status).toBe(200);
      const req = await prod.http.post('/api/auth/request-password-reset', {
        json: { email, redirectTo: 'https://api.market.example/reset' },
      });
      expect(req.status).toBe(200);
      await deliverMail(prod);
      const line = prod.logs.find((l) => l.to === email && /reset/i.test(String(l.subject)));
      expect(line).toBeDefined();
      expect(line!.subject).toMatch(/reset/i);
      expect(JSON.stringify(prod.logs)).not.toContain('/reset-password/');
      const mail = await resetMailTo(prod, email);
      expect(mail.text).toContain('/reset-password/');

      // The user opens the link and resets: the request lines name the route, never the token.
      const link = linkIn(mail);
      const linkToken = link.pathname.split('/').pop()!;
      const opened = await prod.http.get(link.pathname + link.search);
      expect(opened.status).toBe(302);
      const token = new URL(opened.headers.get('location')!).searchParams.get('token')!;
      expect(token).toBe(linkToken);
      const reset = await prod.http.post('/api/auth/reset-password', { json: { newPassword: 'prod password 2', token } });
      expect(reset.status).toBe(200);
      expect(JSON.stringify(prod.logs)).not.toContain(linkToken);
      expect(prod.logs.find((l) => l.msg === 'request' && l.method === 'GET' && l.status === 302)).toMatchObject({
        route: '/api/auth/reset-password/:token',
        path: '/api/auth/reset-password/:token',
        query: ['callbackURL'],
      });
    } finally {
      await prod.close();
    }
  });
});
