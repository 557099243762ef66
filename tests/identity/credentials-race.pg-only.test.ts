import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Base64Url } from '../../functions/auth/oauth/token-records.ts';
import { first, sql, type Db } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, statementsWaitingForLock } from '../support/databases.ts';
import {
  accessTokenFor,
  ALL_SCOPES,
  authorizeInBrowser,
  createOAuthClient,
  defaultOAuthClient,
  pkcePair,
  postForm,
  type TokenSet,
} from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * A grant that ends in the middle of a refresh (migration 20261125001000). The library refreshes in two writes: it
 * marks the presented refresh token rotated, then writes the new one. The attack: an agent (or a thief holding its
 * refresh token) refreshes while the user changes their password or withdraws consent; before the rules, an end
 * committed between the two writes deleted the refresh tokens before the new one existed, and the new refresh token
 * and the access token minted with it outlived it. Now the grant is one transaction that takes the user's row first
 * (functions/auth/oauth/protocol-gaps.ts), as every end does: the end comes wholly before the grant or after it.
 *
 * The interleaving is made exact, not hoped for: a transaction takes the row lock every end takes first (the user's
 * row), so the grant waits for it; the grant is ended in that transaction (the same UPDATE of the password or DELETE
 * of the consent the library makes, firing the same triggers) and committed; then the grant goes on. The same for a
 * code exchanged as a password change ends the session it was issued in, and for an agent deactivated while its
 * backend refreshes.
 *
 * Then a refresh token presented twice (migration 20261125001200): a replayed code answered while a rotation of the
 * same family is under way, and two presentations of one token at once. Two connections at once, so PostgreSQL only.
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t?.close());

const changePassword = (trx: Db, user: TestUser) =>
  sql`update "account" set password = ${'changed-while-refreshing'}
       where "userId" = ${user.userId} and "providerId" = 'credential'`.execute(trx);
const withdrawConsent = (trx: Db, user: TestUser, tokens: TokenSet) =>
  sql`delete from "oauthConsent" where "userId" = ${user.userId} and "clientId" = ${tokens.clientId}`.execute(trx);

const waitingStatements = (pattern: string) => statementsWaitingForLock(t.db, pattern);

/**
 * Waits until `grants` token grants wait for the user's row: the token endpoint takes it first thing in the grant's
 * transaction (functions/auth/oauth/protocol-gaps.ts), before the library reads or rotates anything.
 */
const grantsWaitForTheUser = (grants = 1) =>
  eventually('the grant waits for the user', async () => (await waitingStatements('select 1 from "user" where id = $1 for key share')) >= grants);

/**
 * What a user's grants left behind: refresh tokens still live, and access tokens the token endpoint minted that are
 * not on the revocation list. Both 0 when every grant of the user has ended.
 */
async function aliveOf(user: TestUser): Promise<{ refreshTokens: number; accessTokens: number }> {
  const refresh = await first<{ n: number }>(
    t.db,
    sql`select count(*)::int as n from "oauthRefreshToken" where "userId" = ${user.userId} and revoked is null`,
  );
  const access = await first<{ n: number }>(
    t.db,
    sql`select count(*)::int as n from public.oauth_issued_access_tokens i
          left join public.revoked_tokens r on r.key = 'jti:' || i.jti
         where i.user_id = ${user.userId} and r.key is null`,
  );
  return { refreshTokens: refresh!.n, accessTokens: access!.n };
}

type Answer = Awaited<ReturnType<typeof postForm>>;

/** A presentation of `tokens.refreshToken`, with the client's credentials. */
const refresh = (tokens: Pick<TokenSet, 'clientId' | 'clientSecret' | 'refreshToken'>): Promise<Answer> =>
  postForm(t, '/api/auth/oauth2/token', tokens, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken });

/** An authorization code the user has just granted the shared test client, and its exchange (any number of times). */
async function pendingCode(user: TestUser) {
  const client = await defaultOAuthClient(t);
  const { verifier, challenge } = pkcePair();
  const { code } = await authorizeInBrowser(t, user, client, { challenge, scope: ALL_SCOPES });
  const exchange = (): Promise<Answer> =>
    postForm(t, '/api/auth/oauth2/token', client, { grant_type: 'authorization_code', code, redirect_uri: client.redirectUri, code_verifier: verifier });
  return { client, exchange };
}

/**
 * Sends `request` while a transaction holds the user's row (the lock every end takes first), waits until the library
 * is writing the new refresh token (waiting for that row), ends the grant with `end` in that transaction and commits.
 */
async function whileEnding<T>(user: TestUser, request: () => Promise<T>, end: (trx: Db) => Promise<unknown>): Promise<T> {
  let sent: Promise<T> | undefined;
  await t.db.transaction().execute(async (trx) => {
    await sql`select 1 from "user" where id = ${user.userId} for update`.execute(trx);
    sent = request();
    await grantsWaitForTheUser();
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
      () => refresh(tokens),
      (trx) => (end === 'password' ? changePassword(trx, user) : withdrawConsent(trx, user, tokens)),
    );

    expect(answer.status, answer.text).toBe(400);
    expect(answer.body.error).toBe('invalid_grant');
    expect(answer.body.access_token).toBeUndefined();
    expect(answer.body.refresh_token).toBeUndefined();
    // Nothing of the grant lives: the refresh found it ended and minted nothing (the first access token, on the
    // revocation list, is the only one), and no refresh token is left
    expect((await aliveOf(user)).refreshTokens).toBe(0);
    const minted = await first<{ issued: number; live: number }>(
      t.db,
      sql`select count(*)::int as issued, count(*) filter (where r.key is null)::int as live
            from public.oauth_issued_access_tokens i left join public.revoked_tokens r on r.key = 'jti:' || i.jti
           where i.user_id = ${user.userId}`,
    );
    expect(minted).toEqual({ issued: 1, live: 0 });
    // The presented refresh token was rotated and then deleted by the end: refused as well
    const again = await refresh(tokens);
    expect(again.status).toBe(400);
    expect(again.body.error).toBe('invalid_grant');
  });

  it('attack: a code exchanged just as a password change ends its session gets nothing that works', async () => {
    const user = await signUp(t);
    const { exchange } = await pendingCode(user);
    const answer = await whileEnding(user, exchange, (trx) => changePassword(trx, user));
    expect(answer.status, answer.text).toBe(400);
    expect(answer.body.error).toBe('invalid_grant');
    expect(answer.body.refresh_token).toBeUndefined();
    expect((await aliveOf(user)).refreshTokens).toBe(0);
  });
});

describe('a user deleted beside a refresh', () => {
  it('a refresh under way when its user is deleted answers invalid_grant, not a server error', async () => {
    // The library writes the new refresh token for a user whose row the deletion removed a moment earlier: its foreign
    // key refuses the write. The agent's backend must hear that the grant is gone, as for any other end.
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user);
    const answer = await whileEnding(user, () => refresh(tokens), (trx) => sql`delete from "user" where id = ${user.userId}`.execute(trx));
    expect(answer.status, answer.text).toBe(400);
    expect(answer.body.error).toBe('invalid_grant');
    expect(await aliveOf(user)).toEqual({ refreshTokens: 0, accessTokens: 0 });
  });

  it('a refresh whose user is deleted while its tokens are recorded is issued whole, and the deletion takes it', async () => {
    // The other interleaving: the library's writes succeed, then the user is deleted while the token endpoint records
    // the new access token (before the grant was one transaction, the record's foreign key refused it, and the new
    // tokens were written already). Made exact with a lock on the record table: the recording waits for it, the
    // deletion asks for the user's row, which the grant holds; then both go on, the grant first.
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user);
    let answer: Promise<Answer> | undefined;
    let deletion: Promise<unknown> | undefined;
    await t.db.transaction().execute(async (trx) => {
      await sql`lock table public.oauth_issued_access_tokens in exclusive mode`.execute(trx);
      answer = refresh(tokens);
      await eventually('the refresh records its access token', async () => (await waitingStatements('%oauth_issued_access_tokens%')) > 0);
      deletion = sql`delete from "user" where id = ${user.userId}`.execute(t.db);
      deletion.catch(() => {}); // awaited below
      await eventually('the deletion waits for the grant', async () => (await waitingStatements('delete from "user"%')) > 0);
    }); // commits: both go on
    const res = await answer!;
    await deletion;
    expect(res.status, res.text).toBe(200);
    expect((await t.http.get('/me', { bearer: res.body.access_token })).status).toBe(401);
    expect((await refresh({ ...tokens, refreshToken: res.body.refresh_token })).body.error).toBe('invalid_grant');
    expect(await aliveOf(user)).toEqual({ refreshTokens: 0, accessTokens: 0 });
  });

  it('so does a code exchange under way when its user is deleted', async () => {
    const user = await signUp(t);
    const { exchange } = await pendingCode(user);
    const answer = await whileEnding(user, exchange, (trx) => sql`delete from "user" where id = ${user.userId}`.execute(trx));
    expect(answer.status, answer.text).toBe(400);
    expect(answer.body.error).toBe('invalid_grant');
  });
});

describe('an agent deactivated beside a refresh', () => {
  it('attack: a refresh under way when the agent is deactivated gets no token that outlives the deactivation', async () => {
    // The client authenticated before the deactivation committed; the grant waited for the user's row meanwhile (before
    // it was one transaction, the library minted after the deactivation had copied the client's recorded access tokens
    // to the revocation list, and this one was recorded after the copy).
    const client = await createOAuthClient(t, { name: 'Deactivated Mid-Refresh' });
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user, { client });
    const answer = await whileEnding(
      user,
      () => refresh(tokens),
      (trx) => sql`update public.agents set status = 'inactive' where id = ${client.agentId}`.execute(trx),
    );
    // (the library's answer to a client disabled before it asked, as to any call of a deactivated agent's client)
    expect(answer.status, answer.text).toBe(401);
    expect(answer.body.error).toBe('invalid_client');
    expect(answer.body.access_token).toBeUndefined();
    // The presented refresh token is left as a deactivation leaves every one (refused until a reactivation)
    expect(await aliveOf(user)).toEqual({ refreshTokens: 1, accessTokens: 0 });
  });

  it('attack: a refresh run whole while the deactivation commits gets no token that outlives it', async () => {
    // The other order: the deactivation has disabled the client and copied its recorded tokens to the revocation list
    // but has not committed when the refresh runs, start to end. The library still sees the client enabled, and the
    // token's record comes after the copy; the token endpoint's read of the client (FOR SHARE) waits for the
    // deactivation to commit, and then sees the client disabled.
    const client = await createOAuthClient(t, { name: 'Deactivated While Refreshing' });
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user, { client });
    let answer: Answer | undefined;
    await t.db.transaction().execute(async (trx) => {
      await sql`update public.agents set status = 'inactive' where id = ${client.agentId}`.execute(trx);
      void refresh(tokens).then((r) => (answer = r));
      await eventually('the refresh is answered or its read of the client waits', async () =>
        answer !== undefined || (await waitingStatements('%from "oauthClient" c%')) > 0);
    });
    await eventually('the refresh is answered', async () => answer !== undefined);
    expect(answer!.status, answer!.text).toBe(400);
    expect(answer!.body.error).toBe('invalid_grant');
    expect(await aliveOf(user)).toEqual({ refreshTokens: 0, accessTokens: 0 });
  });
});

describe('a refresh token presented twice', () => {
  it('attack: a rotation that writes its new token only after a reuse ended its family writes it revoked', async () => {
    // A rotation whose new token is written after a reuse ended its family, which no row lock outside the library can
    // bring about (the grant takes the user's row first thing, and the family's end waits for it): the end commits first. By then the library had deleted every token of
    // the family, so the end finds none to delete and must remember the family by its code. The late INSERT is made
    // here as the library makes it: a copy of the family's token under a new value.
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user);
    const rotated = await refresh(tokens);
    expect(rotated.status).toBe(200);
    const reused = await refresh(tokens); // the first token again: a reuse, the family ends
    expect(reused.body.error).toBe('invalid_grant');
    const late = 'written-after-the-end-' + crypto.randomUUID();
    await sql`
      insert into "oauthRefreshToken" (id, token, "clientId", "userId", "authorizationCodeId", scopes, "expiresAt", "createdAt")
      select ${crypto.randomUUID()}, ${await sha256Base64Url(late)}, i.client_id, i.user_id, i.authorization_code_id,
             ${JSON.stringify(ALL_SCOPES.split(' '))}::jsonb, now() + interval '30 days', now()
        from public.oauth_issued_access_tokens i where i.user_id = ${user.userId} limit 1`.execute(t.db);
    const presented = await refresh({ ...tokens, refreshToken: late });
    expect(presented.status, presented.text).toBe(400);
    expect(presented.body.error).toBe('invalid_grant');
    expect(await aliveOf(user)).toEqual({ refreshTokens: 0, accessTokens: 0 });
  });

  it('attack: a code replayed while a refresh of its tokens is under way leaves nothing alive', async () => {
    const user = await signUp(t);
    const { client, exchange } = await pendingCode(user);
    const exchanged = await exchange();
    expect(exchanged.status).toBe(200);
    let rotation: Promise<Answer> | undefined;
    let replay: Answer | undefined;
    await t.db.transaction().execute(async (trx) => {
      await sql`select 1 from "user" where id = ${user.userId} for update`.execute(trx);
      rotation = refresh({ ...client, refreshToken: exchanged.body.refresh_token });
      await grantsWaitForTheUser();
      void exchange().then((r) => (replay = r));
      await eventually('the replay is answered or its end waits', async () =>
        replay !== undefined || (await waitingStatements('%end_refresh_token_families%')) > 0);
    });
    const rotated = await rotation!;
    await eventually('the replay is answered', async () => replay !== undefined);
    expect(replay!.status, replay!.text).toBe(400);
    expect(await aliveOf(user)).toEqual({ refreshTokens: 0, accessTokens: 0 });
    if (rotated.status === 200) expect((await t.http.get('/me', { bearer: rotated.body.access_token })).status).toBe(401);
  });

  it('attack: two presentations of one refresh token at once leave nothing alive', async () => {
    // Both read the token live; a row lock on it holds both at the library's UPDATE that marks it rotated. One
    // rotates it, the library refuses the other as invalid_grant; before 20261125001200 that was not a reuse, and
    // the winner (a thief holding a copy, as likely as the agent) kept a live family.
    const user = await signUp(t);
    const tokens = await accessTokenFor(t, user);
    const answers = await t.db.transaction().execute(async (trx) => {
      await sql`select 1 from "oauthRefreshToken" where "userId" = ${user.userId} for update`.execute(trx);
      const both: [Promise<Answer>, Promise<Answer>] = [refresh(tokens), refresh(tokens)];
      await eventually('both presentations wait to rotate the token', async () =>
        (await waitingStatements('update "oauthRefreshToken"%')) === 2);
      return both;
    });
    const [a, b] = await Promise.all(answers);
    const statuses = [a.status, b.status].sort();
    expect(statuses[1], `${a.text} ${b.text}`).toBe(400); // at most one got tokens
    expect(await aliveOf(user)).toEqual({ refreshTokens: 0, accessTokens: 0 });
    for (const answer of [a, b]) {
      if (answer.status === 200) expect((await t.http.get('/me', { bearer: answer.body.access_token })).status).toBe(401);
      else expect(answer.body.error).toBe('invalid_grant');
    }
  });
});
