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
  // The owner-read policies take only a live token of a client of this API (migration 20261127004200, review 22):
  // the users the claims name, and a first-party client (aud = the API) whose tokens read all of a user's rows.
  await sql`insert into "user" (id, name, email, "emailVerified") values
              ('user-a', 'A', 'user-a@example.test', true), ('user-b', 'B', 'user-b@example.test', true)`.execute(t.db);
  await sql`insert into "oauthClient" (id, "clientId", "redirectUris") values ('rls-first-party', ${FIRST_PARTY}, '[]')`.execute(t.db);
  await sql`insert into public.first_party_clients (client_id) values (${FIRST_PARTY})`.execute(t.db);
});
afterAll(() => database.drop());

type Role = 'anon' | 'authenticated';

/** The API's base URL in the claims below: the issuer is `{base}/api/auth`, the first-party audience `{base}`. */
const BASE = 'https://marketplace.rls.test';
const FIRST_PARTY = 'rls-first-party-client';

/**
 * The claims of an access token as the service issues them (docs/oauth.md): by default the first-party client's, for
 * `sub`. PostgREST has verified the signature; the policies judge what the claims say.
 */
function tokenClaims(sub: string, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const now = Math.floor(Date.now() / 1000);
  return {
    role: 'authenticated', sub, aud: BASE, client_id: FIRST_PARTY, azp: FIRST_PARTY, scope: 'openid profile email',
    sid: crypto.randomUUID(), iss: `${BASE}/api/auth`, iat: now - 60, exp: now + 3600, jti: crypto.randomUUID(), ...overrides,
  };
}

/**
 * Runs `query` as PostgREST would for `role` (for authenticated, with the claims of a live first-party token of user
 * `sub`, or the claims given); returns rows or the SQLSTATE.
 */
async function as<T>(role: Role, query: RawBuilder<T>, sub?: string | Record<string, unknown>): Promise<T[] | { error: string }> {
  try {
    return await t.db.transaction().execute(async (trx) => {
      const claims = JSON.stringify(typeof sub === 'object' ? sub : !sub ? { role } : role === 'authenticated' ? tokenClaims(sub) : { sub, role });
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

  it.each(['anon', 'authenticated'] as const)("%s reads the columns a tier shows, never its Stripe ids (found by a review)", async (role) => {
    // The whole table was granted, so /rest/v1/tiers?select=stripe_price_id answered them (migration 20261127000200).
    await sql`update tiers set stripe_product_id = 'prod_rls', stripe_price_id = ${`price_rls_${role}`}
              where agent_id = ${agents.active!.id} and name = 'Public'`.execute(t.db);
    for (const column of ['stripe_product_id', 'stripe_price_id']) {
      expect(await as(role, sql`select ${sql.ref(column)} from tiers`)).toEqual({ error: '42501' });
    }
    expect(await as(role, sql`select * from tiers`)).toEqual({ error: '42501' });
    const shown = (await as(role, sql`select id, agent_id, name, price_cents, currency, interval, is_public, features, created_at, updated_at
                                       from tiers where agent_id = ${agents.active!.id}`)) as any[];
    expect(shown.map((x) => x.name)).toEqual(['Public']);
  });

  it.each(['anon', 'authenticated'] as const)("%s does not read a tag only a draft or inactive agent carries (found by a review)", async (role) => {
    // GET /tags hides such a tag so a draft's tags do not announce it; the tags policy was `using (true)`.
    const suffix = `${role}-${crypto.randomUUID().slice(0, 8)}`;
    const tag = async (slug: string, agentIds: string[]) => {
      const [row] = await rows<{ id: string }>(t.db, sql`insert into tags (slug, name) values (${slug}, ${slug}) returning id`);
      for (const agentId of agentIds) await sql`insert into agent_tags (agent_id, tag_id) values (${agentId}, ${row!.id})`.execute(t.db);
    };
    await tag(`secret-project-${suffix}`, [agents.draft!.id, agents.inactive!.id]);
    await tag(`public-topic-${suffix}`, [agents.draft!.id, agents.coming_soon!.id]);
    // One an admin made on its own (createTag) is read like GET /tags lists it, carried or not (review 91).
    await sql`insert into tags (slug, name, standalone) values (${`own-topic-${suffix}`}, 'Own topic', true)`.execute(t.db);
    // And one nothing carries that createAgent or updateAgent made (a draft's, re-tagged) is not.
    await tag(`dropped-by-draft-${suffix}`, []);
    const read = (await as(role, sql`select slug from tags where slug like ${`%-${suffix}`} order by slug`)) as Array<{ slug: string }>;
    expect(read.map((x) => x.slug)).toEqual([`own-topic-${suffix}`, `public-topic-${suffix}`]);
    const view = (await as(role, sql`select tags from catalog_agents where id = ${agents.coming_soon!.id}`)) as any[];
    expect(view[0].tags).toContain(`public-topic-${suffix}`);
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

  it.each(['anon', 'authenticated'] as const)("%s reads reviews without their authors' ids, and whether an agent's backend wrote them (review 49)", async (role) => {
    expect(await as(role, sql`select user_id from reviews`, 'user-a')).toEqual({ error: '42501' });
    expect(await as(role, sql`select * from reviews`, 'user-a')).toEqual({ error: '42501' });
    expect(await as(role, sql`select user_id from catalog_reviews`, 'user-a')).toEqual({ error: '42703' });
    // nor from when a review is shown (a shown row's value would tell its author's past ban: migration 20261127005600)
    expect(await as(role, sql`select shown_from from reviews`, 'user-a')).toEqual({ error: '42501' });
    expect(await as(role, sql`select id from reviews where shown_from > '-infinity'`, 'user-a')).toEqual({ error: '42501' });
    const [row] = (await as(role, sql`select * from catalog_reviews where agent_id = ${agents.active!.id}`, 'user-a')) as any[];
    expect(Object.keys(row).sort()).toEqual(['agent_id', 'body', 'created_at', 'id', 'rating', 'title', 'updated_at', 'written_by_agent']);
    const [granted] = (await as(role, sql`select id, rating, written_by_agent from reviews where agent_id = ${agents.active!.id}`, 'user-a')) as any[];
    expect(granted).toMatchObject({ rating: 5, written_by_agent: false });
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
      const [userAs] = await rows<{ id: string }>(t.db, sql`select id from reviews where agent_id = ${agentId} and user_id = 'user-a'`);
      for (const view of ['reviews', 'catalog_reviews']) {
        const listed = (await as(role, sql`select id from ${sql.table(view)} where agent_id = ${agentId}`, 'user-a')) as any[];
        expect(listed.map((r) => r.id)).toEqual([userAs!.id]);
      }
      const [aggregates] = (await as(role, sql`select review_count, average_rating from catalog_agents where id = ${agentId}`, 'user-a')) as any[];
      expect([aggregates.review_count, Number(aggregates.average_rating)]).toEqual([1, 5]);
    } finally {
      await sql`delete from reviews where user_id = ${banned}`.execute(t.db);
      await sql`delete from "user" where id = ${banned}`.execute(t.db);
    }
  });

  it.each(['anon', 'authenticated'] as const)('%s cannot learn whether an account it knows the id of is banned (found by reviews)', async (role) => {
    // Agent backends know their users' ids (tokens' `sub`, webhook payloads). A banned author's review on a published
    // agent is hidden; what these roles can ask about the author by id must answer alike for an author in good
    // standing who wrote nothing, and one whose reviews sit on a draft agent nobody can list. The ban check was
    // security definer by user id (public.review_author_in_good_standing): it told them apart (two reviews in a row
    // narrowed it, the third took the user id away: migration 20261126002900).
    const ids = { banned: `ban-${role}`, none: `none-${role}`, hidden: `hid-${role}` };
    for (const [key, id] of Object.entries(ids)) {
      const banned = key === 'banned' || key === 'hidden';
      await sql`insert into "user" (id, name, email, "emailVerified", banned) values (${id}, 'U', ${`${id}@example.test`}, true, ${banned})`.execute(t.db);
    }
    await sql`insert into reviews (agent_id, user_id, rating) values (${agents.active!.id}, ${ids.banned}, 1), (${agents.draft!.id}, ${ids.hidden}, 1)`.execute(t.db);
    try {
      const asked = async (userId: string) => [
        await as(role, sql`select public.review_author_in_good_standing(${userId}) as shown`, 'user-a'),
      ];
      const none = await asked(ids.none);
      expect(await asked(ids.banned)).toEqual(none);
      expect(await asked(ids.hidden)).toEqual(none);
      // Nor can they ask the reviews by author: the author's id is not theirs to read (review 49)
      expect(await as(role, sql`select id from reviews where user_id = ${ids.banned}`, 'user-a')).toEqual({ error: '42501' });
      expect(await as(role, sql`select id from catalog_reviews where user_id = ${ids.banned}`, 'user-a')).toEqual({ error: '42703' });
      // ...and the check they can call answers by review id: for a review they can list, it is shown
      const [listed] = (await as(role, sql`select id from reviews where agent_id = ${agents.active!.id}`, 'user-a')) as any[];
      expect(await as(role, sql`select public.review_shown(${listed.id}::uuid) as shown`, 'user-a')).toEqual([{ shown: true }]);
    } finally {
      await sql`delete from reviews where user_id in (${ids.banned}, ${ids.hidden})`.execute(t.db);
      await sql`delete from "user" where id in (${ids.banned}, ${ids.none}, ${ids.hidden})`.execute(t.db);
    }
  });

  it("a subscriber reads what an addon of their subscription gives, not the admin's note or which admins granted it (found by a review)", async () => {
    await sql`insert into "user" (id, name, email, "emailVerified") values ('addon-owner', 'S', 'addon-owner@example.test', true)`.execute(t.db);
    const tier = await insertTier(t.db, agents.active!.id, { name: 'Addon tier' });
    const [sub] = await rows<{ id: string }>(t.db, sql`insert into subscriptions (user_id, agent_id, tier_id, status, current_period_start, current_period_end)
        values ('addon-owner', ${agents.active!.id}, ${tier.id}, 'active', now() - interval '1 day', now() + interval '29 days') returning id`);
    const [metric] = await rows<{ id: string }>(t.db, sql`insert into metric_definitions (agent_id, slug, name, kind)
        values (${agents.active!.id}, 'addon-calls', 'Calls', 'fixed') returning id`);
    await sql`insert into usage_addons (subscription_id, metric_id, amount, duration, note, granted_by)
        values (${sub!.id}, ${metric!.id}, 500, 'permanent', 'goodwill after a chargeback threat', 'an-admin')`.execute(t.db);
    try {
      const given = (await as('authenticated', sql`select amount, duration, revoked_at from usage_addons where subscription_id = ${sub!.id}`, 'addon-owner')) as any[];
      expect(given.map((a) => [Number(a.amount), a.duration, a.revoked_at])).toEqual([[500, 'permanent', null]]);
      for (const column of ['note', 'granted_by', 'revoked_by']) {
        expect(await as('authenticated', sql`select ${sql.ref(column)} from usage_addons`, 'addon-owner')).toEqual({ error: '42501' });
      }
      expect(await as('authenticated', sql`select * from usage_addons`, 'addon-owner')).toEqual({ error: '42501' });
      expect(await as('authenticated', sql`select amount from usage_addons where subscription_id = ${sub!.id}`, 'user-b')).toEqual([]);
    } finally {
      await sql`delete from subscriptions where id = ${sub!.id}`.execute(t.db);
      await sql`delete from metric_definitions where id = ${metric!.id}`.execute(t.db);
      await sql`delete from "user" where id = 'addon-owner'`.execute(t.db);
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

  it("a token reads its user's rows only within its agent, and only while a bearer route would take it (review 22)", async () => {
    // The owner-read policies asked only `user_id = sub`: an agent's token read the user's rows of every agent, and
    // went on reading after a revocation or a ban. Now public.data_api_token_may_read judges the claims as the
    // authenticator does (tokenAgent's audience, public.bearer_caller). tests/catalog/rls-access-tokens.test.ts runs
    // the same attack with tokens the OAuth flow issued.
    const active = agents.active!.id;
    const other = agents.coming_soon!.id;
    await sql`insert into "oauthClient" (id, "clientId", "redirectUris") values ('rls-agent', 'rls-agent-client', '[]')`.execute(t.db);
    await sql`insert into public.agent_oauth_clients (agent_id, client_id) values (${active}, 'rls-agent-client')`.execute(t.db);
    const agentToken = (overrides: Record<string, unknown> = {}) =>
      tokenClaims('user-a', { aud: [`${BASE}/agents/${active}`, `${BASE}/api/auth/oauth2/userinfo`], client_id: 'rls-agent-client', azp: 'rls-agent-client', ...overrides });
    const installs = async (claims: Record<string, unknown>) => ids(await as('authenticated', sql`select agent_id from agent_installs`, claims));
    try {
      expect(await installs(agentToken())).toEqual([active]);
      expect(await installs(agentToken({ aud: `${BASE}/agents/${active.toUpperCase()}` }))).toEqual([active]);
      expect(await installs(tokenClaims('user-a'))).toEqual(Object.values(agents).map((a) => a.id).sort());
      const refused: Record<string, Record<string, unknown>> = {
        "another agent's audience": agentToken({ aud: `${BASE}/agents/${other}` }),
        'an agent and the API': agentToken({ aud: [`${BASE}/agents/${active}`, BASE] }),
        'two agents': agentToken({ aud: [`${BASE}/agents/${active}`, `${BASE}/agents/${other}`] }),
        'no audience of this API': agentToken({ aud: `${BASE}/api/auth/oauth2/userinfo` }),
        'another issuer': agentToken({ iss: 'https://project.supabase.co/auth/v1' }),
        'the API audience for an agent client': agentToken({ aud: BASE }),
        "the first-party client with an agent's audience": tokenClaims('user-a', { aud: `${BASE}/agents/${active}` }),
        'no client': agentToken({ client_id: undefined, azp: undefined }),
        'expired': agentToken({ exp: Math.floor(Date.now() / 1000) - 1 }),
        'no issue time': agentToken({ iat: undefined }),
      };
      for (const [name, claims] of Object.entries(refused)) expect([name, await installs(claims)]).toEqual([name, []]);

      // the revocation list, as bearer routes read it: the token, its grant (session), every token of the user
      const revoke = (key: string, issuedBefore: Date | null = null) =>
        sql`insert into public.revoked_tokens (key, expires_at, issued_before) values (${key}, now() + interval '1 hour', ${issuedBefore})`.execute(t.db);
      const byJti = agentToken();
      await revoke(`jti:${byJti.jti}`);
      expect(await installs(byJti)).toEqual([]);
      const byGrant = agentToken();
      await revoke(`grant:${byGrant.sid}`);
      expect(await installs(byGrant)).toEqual([]);
      const hour = 3600;
      const before = agentToken({ iat: Math.floor(Date.now() / 1000) - 2 * hour });
      const after = agentToken({ iat: Math.floor(Date.now() / 1000) });
      await revoke('user:user-a', new Date(Date.now() - hour * 1000));
      expect([await installs(before), await installs(after), await installs(tokenClaims('user-a', { iat: before.iat }))]).toEqual([[], [active], []]);
      await sql`delete from public.revoked_tokens where key = 'user:user-a'`.execute(t.db);

      // a ban, while it lasts (also without the `user:` revocation the ban wrote, which a bearer route reads besides)
      await sql`update "user" set banned = true, "banExpires" = now() + interval '1 hour' where id = 'user-a'`.execute(t.db);
      expect([await installs(agentToken()), await installs(tokenClaims('user-a'))]).toEqual([[], []]);
      await sql`delete from public.revoked_tokens where key = 'user:user-a'`.execute(t.db);
      expect([await installs(agentToken()), await installs(tokenClaims('user-a'))]).toEqual([[], []]);
      await sql`update "user" set "banExpires" = now() - interval '1 second' where id = 'user-a'`.execute(t.db);
      expect(await installs(agentToken())).toEqual([active]);
    } finally {
      await sql`update "user" set banned = null, "banExpires" = null where id = 'user-a'`.execute(t.db);
      await sql`delete from public.revoked_tokens where key like 'jti:%' or key like 'grant:%' or key = 'user:user-a'`.execute(t.db);
      await sql`delete from "oauthClient" where "clientId" = 'rls-agent-client'`.execute(t.db);
    }
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
