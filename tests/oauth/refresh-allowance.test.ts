import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, createOAuthClient, defaultOAuthClient, postForm, type TestOAuthClient } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * An agent refreshing one grant in a loop got every refresh, and each kept a refresh-token row for 30 days and an
 * issued-access-token row for 10 hours (review 52): one client's refreshes for one user are at most 60 an hour, the
 * rest answered 429 with Retry-After before anything rotates.
 */

let t: TestApp;
let client: TestOAuthClient;

beforeAll(async () => {
  t = await startTestApp();
  client = await defaultOAuthClient(t);
});
afterAll(() => t.close());

const refresh = (c: TestOAuthClient, refreshToken: string) =>
  postForm(t, '/api/auth/oauth2/token', c, { grant_type: 'refresh_token', refresh_token: refreshToken });

const keptRows = async (user: TestUser) =>
  (await first<{ refresh: number; access: number }>(
    t.db,
    sql`select (select count(*)::int from "oauthRefreshToken" where "userId" = ${user.userId}) as refresh,
               (select count(*)::int from public.oauth_issued_access_tokens where user_id = ${user.userId}) as access`,
  ))!;

describe('attack: an agent refreshing one grant in a loop', () => {
  test('past 60 refreshes in an hour it gets 429 with Retry-After, nothing rotates, others go on, and an hour later it refreshes again', async () => {
    const user = await signUp(t);
    let { refreshToken } = await accessTokenFor(t, user, { client });
    const statuses: number[] = [];
    for (let i = 0; i < 150; i++) {
      const res = await refresh(client, refreshToken);
      statuses.push(res.status);
      if (res.status === 200) refreshToken = res.body.refresh_token;
    }
    expect(statuses.filter((s) => s === 200).length).toBe(60);
    expect(statuses.slice(60).every((s) => s === 429)).toBe(true);

    const kept = await keptRows(user);
    const refused = await refresh(client, refreshToken);
    expect(refused.status).toBe(429);
    expect(refused.body).toEqual({ error: 'invalid_request', error_description: expect.stringContaining('60') });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(Number(refused.headers.get('retry-after'))).toBeLessThanOrEqual(3600);
    expect(await keptRows(user)).toEqual(kept); // nothing written, the presented token not rotated

    // another user of the same client, and the same user with another client, are not held back
    const other = await signUp(t);
    expect((await refresh(client, (await accessTokenFor(t, other, { client })).refreshToken)).status).toBe(200);
    const otherClient = await createOAuthClient(t);
    expect((await refresh(otherClient, (await accessTokenFor(t, user, { client: otherClient })).refreshToken)).status).toBe(200);

    t.clock.advance(Number(refused.headers.get('retry-after')) * 1000 + 1000);
    const later = await refresh(client, refreshToken);
    expect(later.status, later.text).toBe(200);
  });

  test('attack: a refresh token sent without the client secret spends none of the grant\'s allowance', async () => {
    // Whoever held a live refresh token but not the agent's secret used up the agent's hour with 401s.
    const user = await signUp(t);
    const { refreshToken } = await accessTokenFor(t, user, { client });
    const wrong = { ...client, clientSecret: 'not-the-secret' };
    for (let i = 0; i < 70; i++) expect((await refresh(wrong, refreshToken)).status).toBe(401);
    const real = await refresh(client, refreshToken);
    expect(real.status, real.text).toBe(200);
  });

  test("attack: another agent presenting the grant's refresh token with its own secret spends none of the allowance", async () => {
    // Another client authenticates fine (its own secret), and the library refuses the token: it counted all the same.
    const user = await signUp(t);
    const { refreshToken } = await accessTokenFor(t, user, { client });
    const hostile = await createOAuthClient(t, { name: 'Hostile refresher' });
    for (let i = 0; i < 70; i++) expect((await refresh(hostile, refreshToken)).status).toBe(400);
    const real = await refresh(client, refreshToken);
    expect(real.status, real.text).toBe(200);
  });
});
