import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, signIn, createAdmin } from '../support/users.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

it('signs up, signs in and reads /me', async () => {
  const u = await signUp(t);
  const me = await t.http.get('/me', { cookie: u.cookie });
  expect(me.status, me.text).toBe(200);
  const s = await signIn(t, u);
  const me2 = await t.http.get('/me', { cookie: s.cookie });
  expect(me2.body.data.email).toBe(u.email);
  const a = await createAdmin(t);
  const me3 = await t.http.get('/me', { cookie: a.cookie });
  expect(me3.body.data.role).toBe('platform_admin');
});
