import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, rows, sql, type RawBuilder } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { insertAgent, type AgentRow } from '../support/fixtures.ts';
import { createAgent, expectError } from './helpers.ts';

/**
 * An agent's `reviewCount` and `averageRating` are read from tallies the database keeps as reviews and bans change
 * (migration 20261127004700, review 33: they were counted review by review on every read, seconds for agents with
 * thousands of reviews). Through every change a review or its author can go through, what GET /agents/{id}, GET
 * /agents and the Data API's `catalog_agents` show is the count and average of the reviews `public.review_shown`
 * shows, the rule's one definition, which each check asks too.
 */

let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

interface Counts {
  reviewCount: number;
  averageRating: number | null;
}

const authOrigin = () => ({ cookie: admin.cookie, headers: { origin: t.baseUrl } });
const review = (agentId: string, user: TestUser, rating: number) =>
  t.http.put(`/agents/${agentId}/reviews`, { cookie: user.cookie, json: { rating } });

/** As PostgREST runs a request of the anon role. */
async function asAnon<T>(query: RawBuilder<T>): Promise<T[]> {
  return t.db.transaction().execute(async (trx) => {
    await sql`select set_config('request.jwt.claims', '{"role":"anon"}', true)`.execute(trx);
    await sql.raw('set local role anon').execute(trx);
    return rows(trx, query);
  });
}

/** The counts of `agentId` everywhere they are shown, and by the rule itself, all equal to `expected`. */
async function expectCounts(agentId: string, expected: Counts) {
  const rule = await first<{ n: number; average: string | null }>(
    t.db,
    sql`select count(*)::int as n, round(avg(rating), 2) as average from reviews where agent_id = ${agentId} and public.review_shown(id)`,
  );
  const [view] = await asAnon(sql<{ review_count: number; average_rating: string | null }>`
    select review_count, average_rating from catalog_agents where id = ${agentId}`);
  const listed = (await t.http.get('/agents?limit=100')).body.data.find((a: { id: string }) => a.id === agentId);
  const agent = (await t.http.get(`/agents/${agentId}`)).body.data;
  const counts = (n: number, average: string | number | null): Counts => ({ reviewCount: n, averageRating: average === null ? null : Number(average) });
  expect({
    rule: counts(rule!.n, rule!.average),
    agent: counts(agent.reviewCount, agent.averageRating),
    list: counts(listed.reviewCount, listed.averageRating),
    dataApi: counts(view!.review_count, view!.average_rating),
  }).toEqual({ rule: expected, agent: expected, list: expected, dataApi: expected });
}

/** The reviews listed of `agentId` to anyone, by their authors: the same over HTTP and through the Data API. */
/** The authors of the reviews the public list shows (it shows no author ids: review 49), and the Data API alike. */
async function listedAuthors(agentId: string): Promise<string[]> {
  const authorsOf = async (ids: string[]) =>
    (await rows<{ user_id: string }>(t.db, sql`select user_id from reviews where id = any(${ids}::uuid[])`)).map((r) => r.user_id).sort();
  const listed = await authorsOf((await t.http.get(`/agents/${agentId}/reviews?limit=100`)).body.data.map((r: { id: string }) => r.id));
  for (const table of ['reviews', 'catalog_reviews']) {
    const read = await asAnon(sql<{ id: string }>`select id from ${sql.table(table)} where agent_id = ${agentId}`);
    expect({ table, authors: await authorsOf(read.map((r) => r.id)) }).toEqual({ table, authors: listed });
  }
  return listed;
}

describe('review counts', () => {
  it('follow a review written, re-rated and deleted', async () => {
    const agent = await createAgent(t, admin);
    await expectCounts(agent.id, { reviewCount: 0, averageRating: null });
    const [a, b, c] = [await signUp(t), await signUp(t), await signUp(t)];
    expect((await review(agent.id, a, 5)).status).toBe(201);
    await expectCounts(agent.id, { reviewCount: 1, averageRating: 5 });
    await review(agent.id, b, 2);
    const mine = (await review(agent.id, c, 2)).body.data;
    await expectCounts(agent.id, { reviewCount: 3, averageRating: 3 });
    expect((await review(agent.id, b, 4)).status).toBe(200);
    await expectCounts(agent.id, { reviewCount: 3, averageRating: 3.67 });
    expect((await t.http.delete(`/agents/${agent.id}/reviews/${mine.id}`, { cookie: c.cookie })).status).toBe(200);
    await expectCounts(agent.id, { reviewCount: 2, averageRating: 4.5 });
    // an admin's delete, and the last review gone
    const all = (await t.http.get(`/agents/${agent.id}/reviews`)).body.data;
    for (const r of all) expect((await t.http.delete(`/agents/${agent.id}/reviews/${r.id}`, { cookie: admin.cookie })).status).toBe(200);
    await expectCounts(agent.id, { reviewCount: 0, averageRating: null });
  });

  it("follow an author's ban and its lifting, in every agent the author reviewed", async () => {
    const [one, two] = [await createAgent(t, admin), await createAgent(t, admin)];
    const [fan, bomber] = [await signUp(t), await signUp(t)];
    for (const agent of [one, two]) {
      await review(agent.id, fan, 5);
      await review(agent.id, bomber, 1);
      await expectCounts(agent.id, { reviewCount: 2, averageRating: 3 });
    }
    expect((await t.http.post(`/admin/users/${bomber.userId}/ban`, { cookie: admin.cookie, json: { reason: 'bombing' } })).status).toBe(200);
    for (const agent of [one, two]) {
      await expectCounts(agent.id, { reviewCount: 1, averageRating: 5 });
      expect(await listedAuthors(agent.id)).toEqual([fan.userId]);
    }
    // a banned author's review re-rated (by an admin's hand, in SQL) or deleted while hidden stays out of the count
    await sql`update reviews set rating = 2 where user_id = ${bomber.userId} and agent_id = ${one.id}`.execute(t.db);
    await expectCounts(one.id, { reviewCount: 1, averageRating: 5 });
    const hidden = (await t.http.get(`/agents/${two.id}/reviews`, { cookie: admin.cookie })).body.data.find((r: any) => r.userId === bomber.userId);
    expect((await t.http.delete(`/agents/${two.id}/reviews/${hidden.id}`, { cookie: admin.cookie })).status).toBe(200);
    await expectCounts(two.id, { reviewCount: 1, averageRating: 5 });

    expect((await t.http.post(`/admin/users/${bomber.userId}/unban`, { cookie: admin.cookie })).status).toBe(200);
    await expectCounts(one.id, { reviewCount: 2, averageRating: 3.5 });
    await expectCounts(two.id, { reviewCount: 1, averageRating: 5 });
    expect(await listedAuthors(one.id)).toEqual([fan.userId, bomber.userId].sort());
  });

  it("follow a temporary ban: hidden while it lasts, counted again when its time passes, with no write in between", async () => {
    const agent = await createAgent(t, admin);
    const [fan, bomber] = [await signUp(t), await signUp(t)];
    await review(agent.id, fan, 4);
    await review(agent.id, bomber, 1);
    // the library's temporary ban: banExpires = now + banExpiresIn
    const banned = await t.http.post('/api/auth/admin/ban-user', { ...authOrigin(), json: { userId: bomber.userId, banExpiresIn: 3 } });
    expect(banned.status, banned.text).toBe(200);
    await expectCounts(agent.id, { reviewCount: 1, averageRating: 4 });
    expect(await listedAuthors(agent.id)).toEqual([fan.userId]);
    // nothing is written when the ban ends: the reads alone must see it end
    const ends = await first<{ ms: number }>(t.db, sql`select extract(epoch from "banExpires" - now()) * 1000 as ms from "user" where id = ${bomber.userId}`);
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, Number(ends!.ms)) + 200));
    await expectCounts(agent.id, { reviewCount: 2, averageRating: 2.5 });
    expect(await listedAuthors(agent.id)).toEqual([fan.userId, bomber.userId].sort());
    // banned again, for good this time, then lifted; and a ban that had already ended when it was set hides nothing
    expect((await t.http.post(`/admin/users/${bomber.userId}/ban`, { cookie: admin.cookie, json: {} })).status).toBe(200);
    await expectCounts(agent.id, { reviewCount: 1, averageRating: 4 });
    await sql`update "user" set banned = true, "banExpires" = now() - interval '1 minute' where id = ${bomber.userId}`.execute(t.db);
    await expectCounts(agent.id, { reviewCount: 2, averageRating: 2.5 });
    await sql`update "user" set "banExpires" = now() + interval '1 hour' where id = ${bomber.userId}`.execute(t.db);
    await expectCounts(agent.id, { reviewCount: 1, averageRating: 4 });
    await sql`update "user" set banned = false, "banExpires" = null where id = ${bomber.userId}`.execute(t.db);
    await expectCounts(agent.id, { reviewCount: 2, averageRating: 2.5 });
  });

  it("follow an author's removal, banned or not", async () => {
    const agent = await createAgent(t, admin);
    const [fan, bomber, banned] = [await signUp(t), await signUp(t), await signUp(t)];
    await review(agent.id, fan, 5);
    await review(agent.id, bomber, 1);
    await review(agent.id, banned, 2);
    await t.http.post('/api/auth/admin/ban-user', { ...authOrigin(), json: { userId: banned.userId, banExpiresIn: 3600 } });
    await expectCounts(agent.id, { reviewCount: 2, averageRating: 3 });
    for (const user of [bomber, banned]) {
      const removed = await t.http.post('/api/auth/admin/remove-user', { ...authOrigin(), json: { userId: user.userId } });
      expect(removed.status, removed.text).toBe(200);
    }
    await expectCounts(agent.id, { reviewCount: 1, averageRating: 5 });
    // the removed temporary ban's hold went with its review: nothing comes back when its hour is over
    expect(await rows(t.db, sql`select held_until from review_holds where agent_id = ${agent.id}`)).toEqual([]);
  });

  it('count reviews written before their author existed, as the rule does, and an account created banned hides them', async () => {
    // reviews.user_id has no foreign key (seeds and imports write reviews by id); review_shown shows a review without an
    // author row, and hides it once the author's row says banned
    const agent = await createAgent(t, admin);
    await sql`insert into reviews (agent_id, user_id, rating) values (${agent.id}, 'imported-1', 3), (${agent.id}, 'imported-2', 5)`.execute(t.db);
    await expectCounts(agent.id, { reviewCount: 2, averageRating: 4 });
    await sql`insert into "user" (id, name, email, "emailVerified", banned) values
                ('imported-1', 'I', 'imported-1@example.test', true, true), ('imported-2', 'I', 'imported-2@example.test', true, false)`.execute(t.db);
    await expectCounts(agent.id, { reviewCount: 1, averageRating: 5 });
    // a review imported for an account already under a temporary ban is hidden while the ban lasts, listed nowhere
    await sql`insert into "user" (id, name, email, "emailVerified", banned, "banExpires") values
                ('imported-3', 'I', 'imported-3@example.test', true, true, now() + interval '1 hour')`.execute(t.db);
    await sql`insert into reviews (agent_id, user_id, rating) values (${agent.id}, 'imported-3', 1)`.execute(t.db);
    await expectCounts(agent.id, { reviewCount: 1, averageRating: 5 });
    expect(await listedAuthors(agent.id)).toEqual(['imported-2']);
  });

  it("the Data API reads the flag of a ban for good as false on every review it can read", async () => {
    // reviews.author_banned_for_good is true only on reviews hidden from the Data API's roles: it tells them nothing
    const agent = await createAgent(t, admin);
    const users = [await signUp(t), await signUp(t), await signUp(t)];
    for (const user of users) await review(agent.id, user, 3);
    await t.http.post(`/admin/users/${users[0]!.userId}/ban`, { cookie: admin.cookie, json: {} });
    await sql`update "user" set banned = true, "banExpires" = now() - interval '1 minute' where id = ${users[1]!.userId}`.execute(t.db);
    const read = await asAnon(sql<{ id: string; author_banned_for_good: boolean }>`
      select id, author_banned_for_good from reviews where agent_id = ${agent.id}`);
    expect(read.map((r) => r.author_banned_for_good)).toEqual([false, false]);
    const authors = await rows<{ user_id: string }>(t.db, sql`select user_id from reviews where id = any(${read.map((r) => r.id)}::uuid[])`);
    expect(authors.map((r) => r.user_id).sort()).toEqual([users[1]!.userId, users[2]!.userId].sort());
    const flagged = await rows<{ user_id: string }>(t.db, sql`select user_id from reviews where agent_id = ${agent.id} and author_banned_for_good`);
    expect(flagged).toEqual([{ user_id: users[0]!.userId }]);
  });
});

describe('review writes', () => {
  it('attack: are rate limited per client address, as the other public writes (review 33: throwaway accounts wrote unbounded reviews)', async () => {
    const limited = await startTestApp({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '3' } });
    try {
      const [a, b, c] = [await insertAgent(limited.db), await insertAgent(limited.db), await insertAgent(limited.db)];
      // two accounts (sign-ups are limited too), each writing to several agents: the limit is the address's
      const [one, two] = [await signUp(limited), await signUp(limited)];
      const put = (agent: AgentRow, user: TestUser) => limited.http.put(`/agents/${agent.id}/reviews`, { cookie: user.cookie, json: { rating: 1 } });
      const statuses = [await put(a, one), await put(b, one), await put(a, two), await put(b, two)].map((res) => res.status);
      expect(statuses).toEqual([201, 201, 201, 429]);
      const refused = await put(c, two);
      expectError(refused, 429, 'RATE_LIMITED');
      expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
      expect(await rows(limited.db, sql`select 1 from reviews where user_id = ${two.userId} and agent_id <> ${a.id}`)).toEqual([]);
      limited.clock.advance(61_000);
      expect((await put(c, two)).status).toBe(201);
    } finally {
      await limited.close();
    }
  });
});
