import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pgCode } from '../../functions/http/errors.ts';
import { first, rows, sql, type RawBuilder } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertAgent, insertTier, type AgentRow } from '../support/fixtures.ts';
import { accessTokenFor, clientOfAgent, createFirstPartyClient, postForm } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * What an access token the OAuth flow issued reads through the Data API (rule 28 with contract.md's Trust boundaries;
 * review 22, finding 3). Our access tokens carry `role: authenticated` and the user as `sub`, so they are what
 * PostgREST, trusting our JWKS, serves `authenticated` to; the owner-read policies asked only `user_id = sub`. An
 * agent's token read the user's subscriptions (Stripe ids included), usage counters, addons, installs and waitlist
 * entries of every other agent, where over HTTP it reads its own agent's, and went on reading after the token was
 * revoked, its session ended or the user banned, which every bearer route refuses. tests/catalog/rls.test.ts holds the
 * claims-level cases (audiences, clients, revocation times, a ban's end).
 *
 * Run as PostgREST runs a request: `set local role authenticated`, `request.jwt.claims` = the token's (verified) claims.
 */
let t: TestApp;
let admin: TestUser;
let agentA: AgentRow;
let agentB: AgentRow;

/** Per user: the id of each table's row of each agent. */
type Rows = Record<'subscriptions' | 'counters' | 'addons' | 'installs' | 'waitlist', Record<string, string>>;

beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  agentA = await insertAgent(t.db, { name: 'Agent A' });
  agentB = await insertAgent(t.db, { name: 'Agent B (a competitor)' });
});
afterAll(() => t.close());

/** A user with a subscription to each agent, a usage counter and an addon on each, an install and a waitlist entry of each. */
async function subscriber(): Promise<{ user: TestUser; rows: Rows }> {
  const user = await signUp(t);
  const made: Rows = { subscriptions: {}, counters: {}, addons: {}, installs: {}, waitlist: {} };
  for (const agent of [agentA, agentB]) {
    const tier = await insertTier(t.db, agent.id, { name: `Free ${crypto.randomUUID().slice(0, 8)}` });
    const ids = await first<{ subscription: string; metric: string; addon: string }>(
      t.db,
      sql`with s as (insert into subscriptions (user_id, agent_id, tier_id, status, current_period_start, current_period_end,
                                                stripe_customer_id, stripe_subscription_id)
                     values (${user.userId}, ${agent.id}, ${tier.id}, 'active', now() - interval '1 day', now() + interval '29 days',
                             ${`cus_${user.userId}`}, ${`sub_${crypto.randomUUID()}`}) returning id),
               m as (insert into metric_definitions (agent_id, slug, name, kind)
                     values (${agent.id}, ${`calls-${crypto.randomUUID().slice(0, 8)}`}, 'Calls', 'fixed') returning id),
               c as (insert into usage_counters (subscription_id, metric_id, period_start, used)
                     select s.id, m.id, '-infinity', 7 from s, m returning subscription_id),
               a as (insert into usage_addons (subscription_id, metric_id, amount, duration)
                     select s.id, m.id, 100, 'permanent' from s, m returning id)
          select s.id as subscription, m.id as metric, a.id as addon from s, m, a, (select count(*) from c) c`,
    );
    await sql`insert into agent_installs (agent_id, user_id) values (${agent.id}, ${user.userId})`.execute(t.db);
    const entry = await first<{ id: string }>(
      t.db,
      sql`insert into waitlist_entries (agent_id, email, user_id) values (${agent.id}, ${user.email}, ${user.userId}) returning id`,
    );
    made.subscriptions[agent.id] = ids!.subscription;
    made.counters[agent.id] = ids!.subscription;
    made.addons[agent.id] = ids!.addon;
    made.installs[agent.id] = agent.id;
    made.waitlist[agent.id] = entry!.id;
  }
  return { user, rows: made };
}

const claimsOf = (jwt: string) => JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString('utf8'));

/** A request of PostgREST with this (verified) JWT: its claims, its role. */
async function asPostgrest<T>(jwt: string, query: RawBuilder<T>): Promise<T[] | { error: string }> {
  const claims = claimsOf(jwt);
  try {
    return await t.db.transaction().execute(async (trx) => {
      await sql`select set_config('request.jwt.claims', ${JSON.stringify(claims)}, true)`.execute(trx);
      await sql.raw(`set local role ${claims.role}`).execute(trx);
      return rows(trx, query);
    });
  } catch (err) {
    const code = pgCode(err);
    if (!code) throw err;
    return { error: code };
  }
}

/** Which agents' rows of `rows` the token reads, table by table (the whole table asked for, as `/rest/v1/<table>`). */
async function agentsRead(jwt: string, made: Rows): Promise<Record<keyof Rows, string[]>> {
  const queries: Record<keyof Rows, RawBuilder<{ id: string }>> = {
    subscriptions: sql`select id from subscriptions`,
    counters: sql`select subscription_id as id from usage_counters`,
    addons: sql`select id from usage_addons`,
    installs: sql`select agent_id as id from agent_installs`,
    waitlist: sql`select id from waitlist_entries`,
  };
  const read = {} as Record<keyof Rows, string[]>;
  for (const [table, query] of Object.entries(queries) as Array<[keyof Rows, RawBuilder<{ id: string }>]>) {
    const result = await asPostgrest(jwt, query);
    if (!Array.isArray(result)) throw new Error(`${table}: ${result.error}`);
    const byId = new Map(Object.entries(made[table]).map(([agentId, id]) => [id, agentId]));
    // a row of anyone else, or of no agent of this user, would show as itself
    read[table] = result.map((r) => byId.get(r.id) ?? `other:${r.id}`).sort();
  }
  return read;
}

/** What a token reading within these agents sees of `subscriber()`'s rows: each table's rows of exactly them. */
const rowsOfAgents = (...agents: AgentRow[]) => {
  const ids = agents.map((a) => a.id).sort();
  return { subscriptions: ids, counters: ids, addons: ids, installs: ids, waitlist: ids };
};
const nothing = rowsOfAgents();

describe("an access token at the Data API (review 22)", () => {
  it("is a token PostgREST takes as the user: role authenticated, the user's sub, its agent in aud", async () => {
    const { user } = await subscriber();
    const claims = claimsOf((await accessTokenFor(t, user, { agentId: agentA.id })).accessToken);
    expect([claims.role, claims.sub]).toEqual(['authenticated', user.userId]);
    expect(claims.aud).toContain(`${t.baseUrl}/agents/${agentA.id}`);
  });

  it("attack: agent A's token reads the user's rows of agent B; it reads agent A's only, as over HTTP", async () => {
    const { user, rows: made } = await subscriber();
    const token = (await accessTokenFor(t, user, { agentId: agentA.id })).accessToken;
    const http = await t.http.get('/me/subscriptions', { bearer: token });
    expect(http.body.data.map((s: { agentId: string }) => s.agentId)).toEqual([agentA.id]);
    expect(await agentsRead(token, made)).toEqual(rowsOfAgents(agentA));
    // and agent B's own token, B's only
    expect(await agentsRead((await accessTokenFor(t, user, { agentId: agentB.id })).accessToken, made)).toEqual(rowsOfAgents(agentB));
  });

  it("the marketplace's first-party client's token (aud: the API) reads all of its user's rows, nobody else's", async () => {
    const { user, rows: made } = await subscriber();
    await subscriber(); // another user's rows, unread
    const client = await createFirstPartyClient(t);
    const token = (await accessTokenFor(t, user, { client, scope: 'openid offline_access' })).accessToken;
    expect(claimsOf(token).aud).toContain(t.baseUrl);
    expect(await agentsRead(token, made)).toEqual(rowsOfAgents(agentA, agentB));
  });

  it("attack: the token reads on after it is revoked, its session ends or its user is banned (every bearer route says 401)", async () => {
    const ends: Record<string, (user: TestUser, token: string) => Promise<unknown>> = {
      // jti:<jti>
      'the token revoked by its agent': async (_user, token) =>
        expect((await postForm(t, '/api/auth/oauth2/revoke', await clientOfAgent(t, agentA.id), { token })).status).toBe(200),
      // grant:<sid>
      'the session it was issued under signed out': async (user) =>
        expect((await t.http.post('/api/auth/sign-out', { cookie: user.cookie, headers: { origin: t.baseUrl } })).status).toBe(200),
      // the ban, and user:<id>
      'its user banned': async (user) =>
        expect((await t.http.post(`/admin/users/${user.userId}/ban`, { cookie: admin.cookie, headers: { origin: t.baseUrl } })).status).toBe(200),
    };
    for (const [name, end] of Object.entries(ends)) {
      const { user, rows: made } = await subscriber();
      const token = (await accessTokenFor(t, user, { agentId: agentA.id })).accessToken;
      expect([name, await agentsRead(token, made)]).toEqual([name, rowsOfAgents(agentA)]);
      await end(user, token);
      expect([name, (await t.http.get('/me/subscriptions', { bearer: token })).status]).toEqual([name, 401]);
      expect([name, await agentsRead(token, made)]).toEqual([name, nothing]);
    }
  });
});

describe('the Data API shows what the HTTP API shows, no more (review 40)', () => {
  it("attack: an agent's token without the email scope reads the user's address from their waitlist entry; with the scope it may", async () => {
    const { user, rows: made } = await subscriber();
    const withoutEmail = (await accessTokenFor(t, user, { agentId: agentA.id, scope: 'openid offline_access' })).accessToken;
    // over HTTP that token learns no address
    expect((await t.http.get('/me', { bearer: withoutEmail })).body.data).not.toHaveProperty('email');
    expect(await agentsRead(withoutEmail, made)).toEqual({ ...rowsOfAgents(agentA), waitlist: [] });
    expect(await asPostgrest(withoutEmail, sql`select email from waitlist_entries`)).toEqual([]);
    const withEmail = (await accessTokenFor(t, user, { agentId: agentA.id, scope: 'openid email' })).accessToken;
    expect(await asPostgrest(withEmail, sql`select email from waitlist_entries`)).toEqual([{ email: user.email }]);
  });

  it("attack: a token reads the Stripe ids and the webhook bookkeeping of the user's subscriptions; it reads what GET /me/subscriptions shows", async () => {
    const { user } = await subscriber();
    const token = (await accessTokenFor(t, user, { agentId: agentA.id })).accessToken;
    for (const column of ['stripe_customer_id', 'stripe_subscription_id', 'pending_invoice_id', 'stripe_read', '*']) {
      expect([column, await asPostgrest(token, sql.raw(`select ${column} from subscriptions`))]).toEqual([column, { error: '42501' }]);
    }
    const shown = await asPostgrest(token, sql`select id, user_id, agent_id, tier_id, status, current_period_start, current_period_end,
                                                      cancel_at_period_end, pending_tier_id, pending_change_kind, created_at from subscriptions`);
    const http = await t.http.get('/me/subscriptions', { bearer: token });
    expect((shown as Array<{ id: string }>).map((row) => row.id)).toEqual(http.body.data.map((sub: { id: string }) => sub.id));
  });
});

