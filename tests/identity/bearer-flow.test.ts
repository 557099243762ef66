import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, postForm } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * Real access tokens (the OAuth flow of tests/support/oauth.ts) against the Authenticator: the library's own
 * admin endpoints (ban-user, remove-user) take effect on bearer tokens on the next request, like ours do.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

const asAdmin = (json: unknown) => ({ cookie: admin.cookie, headers: { origin: t.baseUrl }, json });

describe('real access tokens', () => {
  it('authenticate /me as the user, with the token’s client and grant', async () => {
    const user = await signUp(t);
    const { accessToken } = await accessTokenFor(t, user);
    const res = await t.http.get('/me', { bearer: accessToken });
    expect(res.status).toBe(200);
    // an agent's token: who the user is, nothing about their role or account state
    expect(res.body.data).toEqual({ id: user.userId, email: user.email, name: expect.any(String) });
  });

  it('the library’s ban-user kills the user’s access and refresh tokens; after unban only new tokens work', async () => {
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user);
    expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(200);

    expect((await t.http.post('/api/auth/admin/ban-user', asAdmin({ userId: user.userId }))).status).toBe(200);
    expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(401);
    const refresh = await postForm(t, '/api/auth/oauth2/token', tokens, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken });
    expect([refresh.status, refresh.body.error]).toEqual([400, 'invalid_grant']);

    expect((await t.http.post('/api/auth/admin/unban-user', asAdmin({ userId: user.userId }))).status).toBe(200);
    expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(401);
    // A fresh sign-in and a fresh grant: a new session, so the new token works at once (a ban revokes the tokens
    // of the sessions it ended and those issued before the second it happened: no waiting for the clock).
    const again = await t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password: user.password } });
    const cookie = again.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
    const fresh = await accessTokenFor(t, { ...user, cookie });
    expect((await t.http.get('/me', { bearer: fresh.accessToken })).status).toBe(200);
  });

  it('a token of a user removed through the library is refused', async () => {
    const user = await signUp(t);
    const { accessToken } = await accessTokenFor(t, user);
    expect((await t.http.post('/api/auth/admin/remove-user', asAdmin({ userId: user.userId }))).status).toBe(200);
    const res = await t.http.get('/me', { bearer: accessToken });
    expect(res.status).toBe(401);
    expect(res.body.error.details.signInUrl).toBe(`${t.baseUrl}/sign-in`);
  });
});
