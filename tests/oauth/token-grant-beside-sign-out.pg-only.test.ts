import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, statementsWaitingForLock } from '../support/databases.ts';
import { accessTokenFor, postForm } from '../support/oauth.ts';
import { signUp } from '../support/users.ts';

/**
 * A refresh beside the end of the session its refresh token was issued in (review 47). The token endpoint's grant is
 * one transaction (functions/auth/library-database.ts), so the library's rotation holds the presented refresh token's
 * row (its UPDATE marking it rotated) until the grant commits, while its INSERT of the new refresh token asks for the
 * session's row (the foreign key, and the trigger refresh_token_write_waits_for_ends). Ending that session (a sign-out,
 * RP-initiated logout, a session revoked from the account page, the housekeeping's expired sessions) deletes the
 * session's row and then, through the foreign key's ON DELETE SET NULL, updates every refresh token that names it: the
 * rotated one too. The two waited for each other and PostgreSQL ended one: the refresh answered 503, or the sign-out
 * answered success (the library swallows the error) while the session, its cookie and its access tokens went on
 * working. Now the grant takes the session's row before it touches a token, as it takes the user's and the client's.
 *
 * Exact interleavings, as in tests/identity/credentials-race.pg-only.test.ts: a transaction of the test holds the
 * session's row (the sign-out first, then the refresh waits for it), or the refresh token's row (the refresh first,
 * then the sign-out).
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t?.close());

describe('a refresh beside the end of the session its refresh token was issued in', () => {
  it("the user's sign-out and the agent's refresh both succeed (neither is ended as a deadlock)", async () => {
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user); // issued in the user's live session: the refresh token names it
    const row = await first<{ sessionId: string | null }>(
      t.db,
      sql`select "sessionId" from "oauthRefreshToken" where "userId" = ${user.userId} and revoked is null`,
    );
    const sessionId = row!.sessionId!;
    expect(sessionId).toBeTruthy();

    let signOut: Promise<{ status: number; text: string }> | undefined;
    let refresh: Promise<{ status: number; text: string; body: any }> | undefined;
    await t.db.transaction().execute(async (trx) => {
      await sql`select 1 from "session" where id = ${sessionId} for update`.execute(trx);
      signOut = t.http.post('/api/auth/sign-out', { cookie: user.cookie, headers: { origin: t.baseUrl } });
      await eventually('the sign-out waits to delete the session', async () => (await statementsWaitingForLock(t.db, 'delete from "session"%')) > 0);
      refresh = postForm(t, '/api/auth/oauth2/token', tokens, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken });
      // (before it takes the session's row, it waited at its INSERT, the old token rotated)
      await eventually('the refresh waits for the session', async () =>
        (await statementsWaitingForLock(t.db, 'select 1 from "session"%')) + (await statementsWaitingForLock(t.db, 'insert into "oauthRefreshToken"%')) > 0);
    }); // commits: the sign-out deletes the session, then the refresh goes on
    const [out, refreshed] = await Promise.all([signOut!, refresh!]);
    const logged = t.logs.filter((l) => JSON.stringify(l).includes('deadlock')).length;
    expect({ signOut: out.status, refresh: refreshed.status, deadlocksLogged: logged }, `${out.text} | ${refreshed.text}`).toEqual({
      signOut: 200,
      refresh: 200,
      deadlocksLogged: 0,
    });
    // offline access goes on past the sign-out (docs/oauth.md): the new refresh token works
    const next = await postForm(t, '/api/auth/oauth2/token', tokens, { grant_type: 'refresh_token', refresh_token: refreshed.body.refresh_token });
    expect(next.status, next.text).toBe(200);
  });

  it("the user's sign-out, met by a refresh rotating its token, is not ended as a deadlock", async () => {
    // The order as it came naturally: the rotation's UPDATE made, the sign-out deleting the session and waiting for
    // the rotated row, the rotation's INSERT waiting for the session. Made exact by holding the refresh token's row:
    // the refresh waits to rotate it (the session already taken), and the sign-out waits for the refresh.
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user);
    const row = await first<{ id: string; sessionId: string | null }>(
      t.db,
      sql`select id, "sessionId" from "oauthRefreshToken" where "userId" = ${user.userId} and revoked is null`,
    );
    expect(row!.sessionId).toBeTruthy();

    let signOut: Promise<{ status: number; text: string }> | undefined;
    let refresh: Promise<{ status: number; text: string; body: any }> | undefined;
    await t.db.transaction().execute(async (trx) => {
      await sql`select 1 from "oauthRefreshToken" where id = ${row!.id} for update`.execute(trx);
      refresh = postForm(t, '/api/auth/oauth2/token', tokens, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken });
      await eventually('the refresh waits to rotate its token', async () => (await statementsWaitingForLock(t.db, 'update "oauthRefreshToken"%')) > 0);
      signOut = t.http.post('/api/auth/sign-out', { cookie: user.cookie, headers: { origin: t.baseUrl } });
      await eventually('the sign-out waits', async () =>
        (await statementsWaitingForLock(t.db, 'delete from "session"%')) > 0);
    }); // commits: the rotation goes first
    const [out, refreshed] = await Promise.all([signOut!, refresh!]);
    expect({ signOut: out.status, refresh: refreshed.status }, `${out.text} | ${refreshed.text}`).toEqual({ signOut: 200, refresh: 200 });
    // The sign-out said it succeeded (and cleared the browser's cookie). It must have ended the session, and with it
    // the access tokens issued under it (docs/oauth.md "Ending the session ... access tokens issued under the ended
    // session" are inactive; tests/oauth/code-flow.test.ts).
    const after = {
      sessionRow: (await first<{ n: number }>(t.db, sql`select count(*)::int as n from "session" where id = ${row!.sessionId}`))!.n,
      sessionCookieStillSignedIn: (await t.http.get('/api/auth/get-session', { cookie: user.cookie })).body !== null,
      accessTokenOfTheSession: (await t.http.get('/me', { bearer: tokens.accessToken })).status,
      deadlocksLogged: t.logs.filter((l) => JSON.stringify(l).includes('deadlock')).length,
    };
    expect(after).toEqual({ sessionRow: 0, sessionCookieStillSignedIn: false, accessTokenOfTheSession: 401, deadlocksLogged: 0 });
  });
});
