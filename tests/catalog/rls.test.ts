import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pgCode } from '../../functions/http/errors.ts';
import { rows, sql, type Db, type RawBuilder } from '../../functions/platform/db.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';
import { insertAgent, insertTier, type AgentRow } from '../support/fixtures.ts';

/**
 * What PostgREST's roles can read and write, checked the way PostgREST runs a request: inside a transaction,
 * `set local role` to the token's role and `request.jwt.claims` set to the token's claims.
 */

// Only the database is under test here (no HTTP): a migrated test database of the project's tier.
let database: TestDatabase;
let t: { db: Db };
const agents: Record<string, AgentRow> = {};

beforeAll(async () => {
  database = await createTestDatabase();
  t = { db: database.database.db };
  for (const status of ['active', 'coming_soon', 'draft', 'inactive'] as const) agents[status] = await insertAgent(t.db, { status });
  for (const agent of Object.values(agents)) {
    await insertTier(t.db, agent.id, { name: 'Public', priceCents: 0 });
    await insertTier(t.db, agent.id, { name: 'Hidden', priceCents: 100, isPublic: false });
    await sql`insert into agent_capabilities (agent_id, position, title) values (${agent.id}, 1, 'cap')`.execute(t.db);
    await sql`insert into reviews (agent_id, user_id, rating) values (${agent.id}, 'user-a', 5)`.execute(t.db);
    await sql`with m as (insert into metric_definitions (agent_id, slug, name, kind) values (${agent.id}, 'calls', 'Calls', 'fixed') returning id)
              insert into tier_quotas (tier_id, metric_id, quota_limit)
              select t.id, m.id, 10 from tiers t, m where t.agent_id = ${agent.id}`.execute(t.db);
    await sql`insert into agent_installs (agent_id, user_id) values (${agent.id}, 'user-a'), (${agent.id}, 'user-b')`.execute(t.db);
  }
  await sql`insert into waitlist_entries (agent_id, email, user_id) values
              (${agents.coming_soon!.id}, 'a@example.test', 'user-a'), (${agents.coming_soon!.id}, 'b@example.test', 'user-b')`.execute(t.db);
  await sql`insert into notification_recipients (email) values ('sales@example.test')`.execute(t.db);
});
afterAll(() => database.drop());

type Role = 'anon' | 'authenticated';

/** Runs `query` as PostgREST would for `role` (and a user id for authenticated); returns rows or the SQLSTATE. */
async function as<T>(role: Role, query: RawBuilder<T>, sub?: string): Promise<T[] | { error: string }> {
  try {
    return await t.db.transaction().execute(async (trx) => {
      const claims = JSON.stringify(sub ? { sub, role } : { role });
      await sql`select set_config('request.jwt.claims', ${claims}, true)`.execute(trx);
      await sql.raw(`set local role ${role}`).execute(trx);
      return rows(trx, query);
    });
  } catch (err) {
    const code = pgCode(err);
    if (!code) throw err;
    return { error: code };
  }
}

const ids = (result: unknown) => (result as Array<{ agent_id?: string; id?: string }>).map((r) => r.agent_id ?? r.id).sort();
const published = () => [agents.active!.id, agents.coming_soon!.id].sort();

describe('anon and authenticated reads', () => {
  it.each(['anon', 'authenticated'] as const)('%s sees only active and coming-soon agents, in the views and the tables', async (role) => {
    expect(ids(await as(role, sql`select id from catalog_agents`))).toEqual(published());
    expect(ids(await as(role, sql`select id from agents`))).toEqual(published());
    const view = (await as(role, sql`select id, review_count, tags from catalog_agents where id = ${agents.active!.id}`)) as any[];
    expect(view[0]).toMatchObject({ review_count: 1 });
  });

  it.each(['anon', 'authenticated'] as const)('%s sees public tiers of published agents only', async (role) => {
    const tiers = (await as(role, sql`select agent_id, name from catalog_tiers`)) as any[];
    expect(tiers.every((x) => x.name === 'Public')).toBe(true);
    expect(ids(tiers)).toEqual(published());
    const direct = (await as(role, sql`select agent_id, name from tiers`)) as any[];
    expect(direct.every((x) => x.name === 'Public')).toBe(true);
    expect(ids(direct)).toEqual(published());
  });

  it.each(['anon', 'authenticated'] as const)('%s sees metrics of published agents and quotas of their public tiers only', async (role) => {
    expect(ids(await as(role, sql`select agent_id from metric_definitions`))).toEqual(published());
    // A public tier of a draft or inactive agent is hidden, and so are its quotas: tier_quotas' policy asks for a public
    // tier, and its subquery on tiers runs under the tiers policy (published agents only).
    // Each agent has a public and a hidden tier with one quota each: only the two published agents' public tiers show.
    const visible = await database.database.db.transaction().execute((trx) =>
      rows<{ tier_id: string }>(trx, sql`select q.tier_id from tier_quotas q join tiers t on t.id = q.tier_id
                                        join agents a on a.id = t.agent_id
                                        where t.is_public and a.status in ('active', 'coming_soon') order by 1`));
    expect(await as(role, sql`select tier_id from tier_quotas order by 1`)).toEqual(visible);
    expect(visible).toHaveLength(2);
  });

  it('anon sees content and reviews of published agents only', async () => {
    for (const view of ['catalog_capabilities', 'catalog_reviews', 'agent_capabilities', 'reviews']) {
      expect(ids(await as('anon', sql`select agent_id from ${sql.table(view)}`))).toEqual(published());
    }
  });

  it.each(['anon', 'authenticated'] as const)("%s does not see a banned author's review, in the table, the reviews view or the agent's aggregates", async (role) => {
    const agentId = agents.active!.id;
    const banned = `banned-${role}`;
    await sql`insert into "user" (id, name, email, "emailVerified", banned) values (${banned}, 'B', ${`${banned}@example.test`}, true, true)`.execute(t.db);
    await sql`insert into reviews (agent_id, user_id, rating) values (${agentId}, ${banned}, 1)`.execute(t.db);
    try {
      for (const view of ['reviews', 'catalog_reviews']) {
        const authors = (await as(role, sql`select user_id from ${sql.table(view)} where agent_id = ${agentId}`, 'user-a')) as any[];
        expect(authors.map((r) => r.user_id)).toEqual(['user-a']);
      }
      const [aggregates] = (await as(role, sql`select review_count, average_rating from catalog_agents where id = ${agentId}`, 'user-a')) as any[];
      expect([aggregates.review_count, Number(aggregates.average_rating)]).toEqual([1, 5]);
    } finally {
      await sql`delete from reviews where user_id = ${banned}`.execute(t.db);
      await sql`delete from "user" where id = ${banned}`.execute(t.db);
    }
  });

  it.each(['anon', 'authenticated'] as const)('%s cannot learn whether an account that wrote no review is banned (found by a review)', async (role) => {
    // The predicate is security definer over the library's users, and these roles may call it (the policy and the
    // views do): it must say nothing the reviews list does not.
    await sql`insert into "user" (id, name, email, "emailVerified", banned) values (${`nrb-${role}`}, 'B', ${`nrb-${role}@example.test`}, true, true)`.execute(t.db);
    await sql`insert into "user" (id, name, email, "emailVerified") values (${`nrf-${role}`}, 'F', ${`nrf-${role}@example.test`}, true)`.execute(t.db);
    try {
      const banned = await as(role, sql`select public.review_author_in_good_standing(${`nrb-${role}`}) as shown`, 'user-a');
      const fine = await as(role, sql`select public.review_author_in_good_standing(${`nrf-${role}`}) as shown`, 'user-a');
      expect(banned).toEqual(fine);
    } finally {
      await sql`delete from "user" where id in (${`nrb-${role}`}, ${`nrf-${role}`})`.execute(t.db);
    }
  });

  it.each(['draft', 'inactive'] as const)("anon cannot tell a banned author from one in good standing when their reviews are on a %s agent nobody can list (found by a review)", async (status) => {
    const agent = await insertAgent(t.db, { status });
    const banned = `unl-b-${status}`;
    const fine = `unl-f-${status}`;
    await sql`insert into "user" (id, name, email, "emailVerified", banned) values (${banned}, 'B', ${`${banned}@example.test`}, true, true)`.execute(t.db);
    await sql`insert into "user" (id, name, email, "emailVerified") values (${fine}, 'F', ${`${fine}@example.test`}, true)`.execute(t.db);
    await sql`insert into reviews (agent_id, user_id, rating) values (${agent.id}, ${banned}, 1), (${agent.id}, ${fine}, 5)`.execute(t.db);
    try {
      expect(await as('anon', sql`select id from reviews where user_id in (${banned}, ${fine})`)).toEqual([]);
      const b = await as('anon', sql`select public.review_author_in_good_standing(${banned}) as shown`);
      const f = await as('anon', sql`select public.review_author_in_good_standing(${fine}) as shown`);
      expect(b).toEqual(f);
    } finally {
      await sql`delete from reviews where agent_id = ${agent.id}`.execute(t.db);
      await sql`delete from "user" where id in (${banned}, ${fine})`.execute(t.db);
    }
  });

  it('anon cannot read installs, waitlist entries, notification recipients or interactions', async () => {
    for (const table of ['agent_installs', 'waitlist_entries', 'notification_recipients', 'interactions']) {
      expect(await as('anon', sql`select * from ${sql.table(table)}`)).toEqual({ error: '42501' });
    }
  });

  it('a signed-in user reads only their own installs and waitlist entries, and no recipients', async () => {
    const installs = (await as('authenticated', sql`select user_id from agent_installs`, 'user-a')) as any[];
    expect(installs).toHaveLength(4);
    expect(new Set(installs.map((r) => r.user_id))).toEqual(new Set(['user-a']));
    const waitlist = (await as('authenticated', sql`select email from waitlist_entries`, 'user-b')) as any[];
    expect(waitlist).toEqual([{ email: 'b@example.test' }]);
    expect(await as('authenticated', sql`select * from waitlist_entries`)).toEqual([]);
    expect(await as('authenticated', sql`select * from notification_recipients`, 'user-a')).toEqual({ error: '42501' });
  });
});

describe('anon and authenticated writes', () => {
  it.each(['anon', 'authenticated'] as const)('%s cannot write catalog tables (only the service does)', async (role) => {
    const agentId = agents.active!.id;
    const attempts = [
      sql`insert into agents (slug, name) values ('sneaky', 'Sneaky')`,
      sql`update agents set name = 'Owned' where id = ${agentId}`,
      sql`delete from agents where id = ${agentId}`,
      sql`update tiers set is_public = true`,
      sql`insert into reviews (agent_id, user_id, rating) values (${agentId}, 'user-a', 1)`,
      sql`insert into tags (slug, name) values ('x', 'x')`,
      sql`insert into waitlist_entries (agent_id, email) values (${agentId}, 'c@example.test')`,
      sql`insert into agent_installs (agent_id, user_id) values (${agentId}, 'user-c')`,
      sql`update agents set installs = installs + 1`,
    ];
    for (const attempt of attempts) expect(await as(role, attempt, 'user-a')).toEqual({ error: '42501' });
    // The views are read-only: not updatable (55000) before privileges even come into it.
    const viaView = await as(role, sql`delete from catalog_agents`, 'user-a');
    expect(['42501', '55000']).toContain((viaView as { error: string }).error);
    const [after] = await rows<{ name: string; installs: number }>(t.db, sql`select name, installs from agents where id = ${agentId}`);
    expect(after).toEqual({ name: agents.active!.name, installs: 0 });
  });
});
