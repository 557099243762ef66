import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { holdOpen } from '../support/databases.ts';
import { authorizeInBrowser, createOAuthClient, pkcePair, postForm, type TestOAuthClient } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * The token endpoint's grant is one transaction: the code used up, or the refresh token rotated, is kept only with
 * the tokens it gave. The auth library wrote each in a statement of its own, so a database connection lost between
 * them (a failover, a network drop) answered 503 with the code already used or the refresh token already revoked:
 * the agent's retry, as docs/errors.md tells it to, got invalid_grant, and a rotated refresh token presented again was
 * taken as stolen, ending the user's tokens for that agent (found by review 42).
 *
 * The library's write of the new refresh token is held (another connection holds the user's row, which the token's
 * foreign key asks for), then the connection it waits on is cut.
 */
let t: TestApp;
let admin: postgres.Sql;
let agent: TestOAuthClient;
beforeAll(async () => {
  t = await startTestApp();
  admin = postgres(t.databaseUrl!, { max: 2, onnotice: () => {} });
  agent = await createOAuthClient(t, { name: 'Atomic Grant Agent' });
});
afterAll(async () => {
  await admin?.end();
  await t?.close();
});

/** Sends `request` while the user's row is held, cuts the connection of the app's statement that waits, releases. */
async function cutMidGrant(user: TestUser, request: () => Promise<{ status: number; text: string }>) {
  const held = await holdOpen(admin, (tx) => tx`select 1 from "user" where id = ${user.userId} for update`);
  const pending = request();
  let pid: number | undefined;
  for (let i = 0; i < 2000 && !pid; i++) {
    const [row] = await admin<{ pid: number }[]>`
      select pid from pg_stat_activity
       where datname = current_database() and application_name = 'agent-marketplace' and wait_event_type = 'Lock'`;
    pid = row?.pid;
    if (!pid) await new Promise((r) => setTimeout(r, 10));
  }
  expect(pid, 'the grant waits for the user row').toBeDefined();
  await admin`select pg_terminate_backend(${pid!})`;
  const answer = await pending;
  await held.release();
  return answer;
}

const tokenRequest = (form: Record<string, string>) => () => postForm(t, '/api/auth/oauth2/token', agent, form);

async function meWith(accessToken: string) {
  return (await t.http.get('/me', { headers: { authorization: `Bearer ${accessToken}` } })).status;
}

describe('a database connection lost during a token grant', () => {
  it('leaves the authorization code unused: the retry gets the tokens', async () => {
    const user = await signUp(t);
    const { verifier, challenge } = pkcePair();
    const { code } = await authorizeInBrowser(t, user, agent, { challenge, scope: 'openid offline_access' });
    const exchange = tokenRequest({ grant_type: 'authorization_code', code, redirect_uri: agent.redirectUri, code_verifier: verifier });

    const cut = await cutMidGrant(user, exchange);
    expect(cut.status, cut.text).toBe(503);

    const retry = await exchange();
    expect(retry.status, retry.text).toBe(200);
    expect(await meWith(retry.body.access_token)).toBe(200);
  });

  it('leaves the refresh token unrotated: the retry rotates it, and the user keeps their tokens', async () => {
    const user = await signUp(t);
    const { verifier, challenge } = pkcePair();
    const { code } = await authorizeInBrowser(t, user, agent, { challenge, scope: 'openid offline_access' });
    const first = await tokenRequest({ grant_type: 'authorization_code', code, redirect_uri: agent.redirectUri, code_verifier: verifier })();
    expect(first.status, first.text).toBe(200);
    const refresh = tokenRequest({ grant_type: 'refresh_token', refresh_token: first.body.refresh_token });

    const cut = await cutMidGrant(user, refresh);
    expect(cut.status, cut.text).toBe(503);

    const retry = await refresh();
    expect(retry.status, retry.text).toBe(200);
    expect(await meWith(retry.body.access_token)).toBe(200);
    // Nothing was taken as a reused token: the first access token still works, and so does the new refresh token.
    expect(await meWith(first.body.access_token)).toBe(200);
    const next = await tokenRequest({ grant_type: 'refresh_token', refresh_token: retry.body.refresh_token })();
    expect(next.status, next.text).toBe(200);
  });
});
