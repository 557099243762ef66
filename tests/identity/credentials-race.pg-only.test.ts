import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql, type Db } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, ALL_SCOPES, authorizeInBrowser, defaultOAuthClient, pkcePair, postForm, type TokenSet } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * A grant that ends in the middle of a refresh (migration 20261125001000). The library refreshes in two
 * transactions: it marks the presented refresh token rotated, then writes the new one. The attack: an agent (or a
 * thief holding its refresh token) refreshes while the user changes their password or withdraws consent; before the
 * rules, an end committed between the two writes deleted the refresh tokens before the new one existed, and the new
 * refresh token and the access token minted with it outlived it.
 *
 * The interleaving is made exact, not hoped for: a transaction takes the row lock every end takes first (the user's
 * row), so the library's INSERT of the new refresh token waits for it; the grant is ended in that transaction (the
 * same UPDATE of the password or DELETE of the consent the library makes, firing the same triggers) and committed;
 * then the INSERT goes on. The same for a code exchanged as a password change ends the session it was issued in.
 * Two connections at once, so PostgreSQL only.
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t?.close());

/** Waits until a statement writing a refresh token is waiting for a lock. */
async function refreshTokenWriteIsWaiting(): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const row = await first<{ n: number }>(
      t.db,
      sql`select count(*)::int as n from pg_stat_activity
           where wait_event_type = 'Lock' and query ilike 'insert into "oauthRefreshToken"%'`,
    );
    if (row!.n > 0) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error('the refresh never reached its INSERT');
}

const changePassword = (trx: Db, user: TestUser) =>
  sql`update "account" set password = ${'changed-while-refreshing'}
       where "userId" = ${user.userId} and "providerId" = 'credential'`.execute(trx);
const withdrawConsent = (trx: Db, user: TestUser, tokens: TokenSet) =>
  sql`delete from "oauthConsent" where "userId" = ${user.userId} and "clientId" = ${tokens.clientId}`.execute(trx);

/**
 * Sends `request` while a transaction holds the user's row (the lock every end takes first), waits until the library
 * is writing the new refresh token (waiting for that row), ends the grant with `end` in that transaction and commits.
 */
async function whileEnding<T>(user: TestUser, request: () => Promise<T>, end: (trx: Db) => Promise<unknown>): Promise<T> {
  let sent: Promise<T> | undefined;
  await t.db.transaction().execute(async (trx) => {
    await sql`select 1 from "user" where id = ${user.userId} for update`.execute(trx);
    sent = request();
    await refreshTokenWriteIsWaiting();
    await end(trx);
  }); // commits: the waiting INSERT goes on
  return sent!;
}

describe('a grant that ends beside a refresh', () => {
  it.each([
    // The user signed out: the agent's offline_access refresh token lives on, no longer tied to a session (where a
    // thief's copy is a week after the user was last active, once the session expired).
    { grant: 'a password change, the grant no longer tied to a session', signOut: true, end: 'password' },
    // Still tied to the user's session, which the change deletes first: the new refresh token is written without it.
    { grant: 'a password change, the grant tied to the live session', signOut: false, end: 'password' },
    // The user withdraws consent while the agent refreshes as fast as it can.
    { grant: 'a consent withdrawal', signOut: false, end: 'consent' },
  ])('attack: a refresh under way when $grant ends it gets nothing that works', async ({ signOut, end }) => {
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user);
    if (signOut) {
      const res = await t.http.post('/api/auth/sign-out', { cookie: user.cookie, headers: { origin: t.baseUrl } });
      expect(res.status).toBe(200);
    }
    const answer = await whileEnding(
      user,
      () => postForm(t, '/api/auth/oauth2/token', tokens, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken }),
      (trx) => (end === 'password' ? changePassword(trx, user) : withdrawConsent(trx, user, tokens)),
    );

    expect(answer.status, answer.text).toBe(400);
    expect(answer.body.error).toBe('invalid_grant');
    expect(answer.body.access_token).toBeUndefined();
    expect(answer.body.refresh_token).toBeUndefined();
    // What the library wrote for that refresh is dead: the new refresh token was born revoked
    const rows = await first<{ live: number }>(
      t.db,
      sql`select count(*)::int as live from "oauthRefreshToken" where "userId" = ${user.userId} and revoked is null`,
    );
    expect(rows!.live).toBe(0);
    // and the access token minted with it (recorded, never handed out) is on the revocation list, like the first one
    const minted = await first<{ issued: number; live: number }>(
      t.db,
      sql`select count(*)::int as issued, count(*) filter (where r.key is null)::int as live
            from public.oauth_issued_access_tokens i left join public.revoked_tokens r on r.key = 'jti:' || i.jti
           where i.user_id = ${user.userId}`,
    );
    expect(minted).toEqual({ issued: 2, live: 0 });
    // The presented refresh token was rotated and then deleted by the end: refused as well
    const again = await postForm(t, '/api/auth/oauth2/token', tokens, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken });
    expect(again.status).toBe(400);
    expect(again.body.error).toBe('invalid_grant');
  });

  it('attack: a code exchanged just as a password change ends its session gets nothing that works', async () => {
    const user = await signUp(t);
    const client = await defaultOAuthClient(t);
    const { verifier, challenge } = pkcePair();
    const { code } = await authorizeInBrowser(t, user, client, { challenge, scope: ALL_SCOPES });
    const answer = await whileEnding(
      user,
      () => postForm(t, '/api/auth/oauth2/token', client, { grant_type: 'authorization_code', code, redirect_uri: client.redirectUri, code_verifier: verifier }),
      (trx) => changePassword(trx, user),
    );
    expect(answer.status, answer.text).toBe(400);
    expect(answer.body.error).toBe('invalid_grant');
    expect(answer.body.refresh_token).toBeUndefined();
    const live = await first<{ n: number }>(
      t.db,
      sql`select count(*)::int as n from "oauthRefreshToken" where "userId" = ${user.userId} and revoked is null`,
    );
    expect(live!.n).toBe(0);
  });
});
