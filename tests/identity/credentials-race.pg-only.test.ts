import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, postForm } from '../support/oauth.ts';
import { signUp } from '../support/users.ts';

/**
 * A password change that lands in the middle of a refresh (migration 20261125001000). The library refreshes in two
 * transactions: it marks the presented refresh token rotated, then writes the new one. The attack: an agent holding a
 * stolen refresh token refreshes while the user changes their password; before the rule, a change committed between
 * the two writes deleted the user's refresh tokens before the new one existed, and the new refresh token and the
 * access token minted with it outlived the change.
 *
 * The interleaving is made exact, not hoped for: a transaction holds the user's row (as the password change itself
 * now does first), so the library's INSERT of the new refresh token waits on its foreign-key check; the password is
 * changed in that transaction (the same UPDATE the library makes, firing the same trigger) and committed; then the
 * INSERT goes on. Two connections at once, so PostgreSQL only.
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

describe('a password change beside a refresh', () => {
  it.each([
    // The user signed out: the agent's offline_access refresh token lives on, no longer tied to a session (where a
    // thief's copy is a week after the user was last active, once the session expired).
    { grant: 'no longer tied to a session', signOut: true },
    // Still tied to the user's session, which the change deletes: the library's write of the new refresh token,
    // naming that session, then fails on its foreign key.
    { grant: 'tied to the live session', signOut: false },
  ])('attack: a refresh under way when the password changes gets nothing that works (grant $grant)', async ({ signOut }) => {
    const user = await signUp(t);
    const stolen = await accessTokenFor(t, user);
    if (signOut) {
      const res = await t.http.post('/api/auth/sign-out', { cookie: user.cookie, headers: { origin: t.baseUrl } });
      expect(res.status).toBe(200);
    }

    let refresh: ReturnType<typeof postForm> | undefined;
    await t.db.transaction().execute(async (trx) => {
      await sql`select 1 from "user" where id = ${user.userId} for update`.execute(trx);
      refresh = postForm(t, '/api/auth/oauth2/token', stolen, { grant_type: 'refresh_token', refresh_token: stolen.refreshToken });
      await refreshTokenWriteIsWaiting();
      await sql`update "account" set password = ${'changed-while-refreshing'}
                 where "userId" = ${user.userId} and "providerId" = 'credential'`.execute(trx);
    }); // commits: the waiting INSERT goes on
    const answer = await refresh!;

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
    // and the access token minted with it (recorded, never handed out) is on the revocation list, like the first one;
    // where the library's write failed, it never got as far as our record
    const minted = await first<{ issued: number; live: number }>(
      t.db,
      sql`select count(*)::int as issued, count(*) filter (where r.key is null)::int as live
            from public.oauth_issued_access_tokens i left join public.revoked_tokens r on r.key = 'jti:' || i.jti
           where i.user_id = ${user.userId}`,
    );
    expect(minted).toEqual({ issued: signOut ? 2 : 1, live: 0 });
    // The stolen refresh token was rotated and then deleted by the change: refused as well
    const again = await postForm(t, '/api/auth/oauth2/token', stolen, { grant_type: 'refresh_token', refresh_token: stolen.refreshToken });
    expect(again.status).toBe(400);
    expect(again.body.error).toBe('invalid_grant');
  });
});
