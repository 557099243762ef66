import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { eventually, statementsWaitingForLock } from '../support/databases.ts';
import type { CallResult } from '../support/http.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { createAgent } from './helpers.ts';

/**
 * The review tallies (migration 20261127004700, review 33) under writes that run at once, on a real server with a pool
 * of connections: each write adds to its agent's tally in its own transaction, and none may be lost or counted twice.
 * (PostgreSQL only: the embedded database runs one statement at a time.)
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

const WRITERS = 8;

/** The agent's counts as shown, and by the rule (public.review_shown, review by review). */
async function counts(agentId: string) {
  const agent = (await t.http.get(`/agents/${agentId}`)).body.data;
  const rule = await first<{ n: number; average: string | null }>(
    t.db,
    sql`select count(*)::int as n, round(avg(rating), 2) as average from reviews where agent_id = ${agentId} and public.review_shown(id)`,
  );
  return {
    shown: { reviewCount: agent.reviewCount, averageRating: agent.averageRating },
    rule: { reviewCount: rule!.n, averageRating: rule!.average === null ? null : Number(rule!.average) },
  };
}

describe('review counts under concurrent writes', () => {
  it(`${WRITERS} new reviews of one agent let go at the same instant: every one counted once`, async () => {
    const agent = await createAgent(t, admin);
    const users = await Promise.all(Array.from({ length: WRITERS }, () => signUp(t)));
    let sent: Promise<CallResult[]> | undefined;
    // A transaction holds the agent's row: each review's foreign key check waits for it, so all the writes are in flight
    // together when it lets go, and their tally updates meet on the agent's one tally row.
    await t.db.transaction().execute(async (trx) => {
      await sql`select 1 from agents where id = ${agent.id} for update`.execute(trx);
      sent = Promise.all(users.map((u, i) => t.http.put(`/agents/${agent.id}/reviews`, { cookie: u.cookie, json: { rating: 1 + (i % 5) } })));
      await eventually('every write waits for the agent row', async () => (await statementsWaitingForLock(t.db, '%insert into public.reviews%')) === WRITERS);
    });
    expect((await sent!).map((r) => r.status)).toEqual(Array(WRITERS).fill(201));
    const ratings = users.map((_, i) => 1 + (i % 5));
    const average = Math.round((ratings.reduce((a, b) => a + b, 0) / WRITERS) * 100) / 100;
    expect(await counts(agent.id)).toEqual({
      shown: { reviewCount: WRITERS, averageRating: average },
      rule: { reviewCount: WRITERS, averageRating: average },
    });
  });

  it('new reviews, re-ratings, deletes and bans of authors of two agents, all at once: the counts are exact', async () => {
    const [one, two] = [await createAgent(t, admin), await createAgent(t, admin)];
    const users = await Promise.all(Array.from({ length: 12 }, () => signUp(t)));
    const put = (agentId: string, u: TestUser, rating: number) => t.http.put(`/agents/${agentId}/reviews`, { cookie: u.cookie, json: { rating } });
    // users 0-7 have reviewed both agents with 3
    const written = await Promise.all(users.slice(0, 8).flatMap((u) => [put(one.id, u, 3), put(two.id, u, 3)]));
    expect(written.every((r) => r.status === 201)).toBe(true);
    const reviewOf = (agentId: string, u: TestUser) => written.find((r) => r.body.data.agentId === agentId && r.body.data.userId === u.userId)!.body.data.id;

    const answers = await Promise.all([
      // users 8-11 write new reviews of both
      ...users.slice(8).flatMap((u) => [put(one.id, u, 5), put(two.id, u, 4)]),
      // users 0-2 re-rate both
      ...users.slice(0, 3).flatMap((u) => [put(one.id, u, 1), put(two.id, u, 5)]),
      // users 3-4 delete theirs of agent one
      ...users.slice(3, 5).map((u) => t.http.delete(`/agents/${one.id}/reviews/${reviewOf(one.id, u)}`, { cookie: u.cookie })),
      // user 5 is banned for good while an admin deletes their review of agent two; user 6 is banned for an hour
      t.http.post(`/admin/users/${users[5]!.userId}/ban`, { cookie: admin.cookie, json: { reason: 'bombing' } }),
      t.http.delete(`/agents/${two.id}/reviews/${reviewOf(two.id, users[5]!)}`, { cookie: admin.cookie }),
      t.http.post('/api/auth/admin/ban-user', { cookie: admin.cookie, headers: { origin: t.baseUrl }, json: { userId: users[6]!.userId, banExpiresIn: 3600 } }),
    ]);
    expect(answers.filter((r) => r.status >= 300).map((r) => `${r.status} ${r.text}`)).toEqual([]);

    // agent one: 8 + 4 new - 2 deleted - users 5 and 6 hidden = 8 shown: users 0-2 at 1, user 7 at 3, users 8-11 at 5
    // agent two: 8 + 4 new - user 5's deleted - user 6 hidden = 10 shown: users 0-2 at 5, users 3, 4, 7 at 3, 8-11 at 4
    expect(await counts(one.id)).toEqual({
      shown: { reviewCount: 8, averageRating: 3.25 },
      rule: { reviewCount: 8, averageRating: 3.25 },
    });
    expect(await counts(two.id)).toEqual({
      shown: { reviewCount: 10, averageRating: 4 },
      rule: { reviewCount: 10, averageRating: 4 },
    });
  });
});
