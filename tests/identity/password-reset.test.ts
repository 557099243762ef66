import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { deliverMail, lastMailTo, linkIn, mailsTo } from '../support/mail.ts';
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

describe('password reset', () => {
  it('mails a link whose token sets a new password; old password and old sessions stop working', async () => {
    const user = await signUp(t);
    const redirectTo = `${t.baseUrl}/reset-password-page`;
    const req = await t.http.post('/api/auth/request-password-reset', { json: { email: user.email, redirectTo } });
    expect(req.status).toBe(200);

    const mail = await lastMailTo(t, user.email);
    expect(mail.subject).toMatch(/reset/i);
    expect(mail.status).toBe('pending');
    expect(await deliverMail(t)).toBeGreaterThanOrEqual(1);
    expect((await lastMailTo(t, user.email)).status).toBe('logged');
    // Outside production the logged line carries the body (the developer needs the link).
    expect(t.logs.some((l) => l.to === user.email && typeof l.text === 'string' && (l.text as string).includes('/reset-password/'))).toBe(true);

    const link = linkIn(mail);
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
    expect(await mailsTo(t, user.email)).toEqual([]);
  });
});

describe('mail in production without SMTP', () => {
  it('logs recipient and subject but never the body (reset links stay in the outbox only)', async () => {
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
      const line = prod.logs.find((l) => l.to === email);
      expect(line).toBeDefined();
      expect(line!.subject).toMatch(/reset/i);
      expect(JSON.stringify(prod.logs)).not.toContain('/reset-password/');
      expect((await lastMailTo(prod, email)).text).toContain('/reset-password/');
    } finally {
      await prod.close();
    }
  });
});
