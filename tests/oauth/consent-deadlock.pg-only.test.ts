import postgres from 'postgres';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createTestDatabase, eventually, statementsWaitingForLock } from '../support/databases.ts';
import { accessTokenFor, createOAuthClient, type TestOAuthClient } from '../support/oauth.ts';
import { signUp } from '../support/users.ts';

/**
 * A transaction PostgreSQL ends to break a deadlock is answered 503 UNAVAILABLE with Retry-After (nothing of it was
 * kept, so the same request may be sent again), never a 500. The deadlock here is a real one, between the user
 * narrowing a consent and another transaction that locks the user's row and then the consent (as removing the
 * user does: the row, then its consents by cascade): the narrowing holds the consent and waits for the user's row,
 * which its trigger locks before revoking the agent's access tokens (migration 20261126001900). It answered 500.
 *
 * Which of the two PostgreSQL ends is decided by whose deadlock_timeout passes first: the app's connections get 3 s
 * (the database's setting) and the other transaction 60 s, so the app's request is the one ended however slowly this
 * machine runs, as long as the second lock is asked for within 3 s of the first wait (it is asked for at once).
 */
let t: TestApp;
let agent: TestOAuthClient;
let other: postgres.Sql;
beforeAll(async () => {
  const testDatabase = await createTestDatabase();
  other = postgres(testDatabase.url!, { max: 1, onnotice: () => {} });
  const [row] = await other<{ name: string }[]>`select current_database() as name`;
  await other.unsafe(`alter database ${row!.name} set deadlock_timeout = '3s'`);
  t = await startTestApp({ testDatabase });
  agent = await createOAuthClient(t, { name: 'Deadlock Agent' });
});
afterAll(async () => {
  await other?.end();
  await t?.close();
});

class Undo extends Error {}

test('a consent narrowed while another transaction holds the user and wants the consent: 503 with Retry-After, then the retry passes', async () => {
  const user = await signUp(t);
  const tokens = await accessTokenFor(t, user, { client: agent });
  const consents = await t.http.get('/api/auth/oauth2/get-consents', { cookie: user.cookie });
  const consent = consents.body.find((c: { clientId: string }) => c.clientId === agent.clientId);
  const narrow = () =>
    t.http.post('/api/auth/oauth2/update-consent', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { id: consent.id, update: { scopes: ['openid'] } } });

  let narrowed: Awaited<ReturnType<typeof narrow>> | undefined;
  await other
    .begin(async (tx) => {
      await tx`set local deadlock_timeout = '60s'`;
      await tx`select 1 from "user" where id = ${user.userId} for update`;
      const pending = narrow();
      await eventually('the narrowing waits for the user row', async () => (await statementsWaitingForLock(t.db, '%oauthConsent%')) > 0);
      await tx`update "oauthConsent" set "updatedAt" = now() where id = ${consent.id}`;
      narrowed = await pending;
      throw new Undo();
    })
    .catch((err) => {
      if (!(err instanceof Undo)) throw err;
    });

  expect(narrowed!.status, narrowed!.text).toBe(503);
  expect(narrowed!.headers.get('retry-after')).toBe('1');
  expect(narrowed!.body).toMatchObject({ status: 'error', error: { code: 'UNAVAILABLE', details: { reason: 'concurrent_change' } } });
  expect(t.logs.some((l) => l.msg === "a concurrent change ended the request's transaction" && l.level === 'warn')).toBe(true);
  // Nothing of it was kept: the agent's token still works until the retry narrows the consent and ends it.
  expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(200);
  const retried = await narrow();
  expect(retried.status, retried.text).toBe(200);
  expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(401);
}, 60_000);
