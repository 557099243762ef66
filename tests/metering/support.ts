import { randomUUID } from 'node:crypto';
import { startFreeSubscription, type SubscriptionDto } from '../../functions/billing/subscriptions.ts';
import { sql, type Db } from '../../functions/platform/db.ts';
import type { TestApp } from '../support/app.ts';
import { insertAgent, insertTier } from '../support/fixtures.ts';
import { accessTokenFor } from '../support/oauth.ts';
import type { TestUser } from '../support/users.ts';

/**
 * Metering test setup: an agent with a free tier and metrics (quotas set in SQL, the way the admin endpoints
 * store them; those endpoints have their own tests), and free subscriptions through the real service.
 */

/** A user row inserted directly, for tests of SQL-level rules that need no session. */
export async function insertUser(db: Db, overrides: { role?: 'user' | 'platform_admin' } = {}): Promise<string> {
  const id = `u_${randomUUID().replace(/-/g, '').slice(0, 20)}`;
  await sql`insert into "user" (id, name, email, "emailVerified", role)
            values (${id}, ${'Test ' + id}, ${id + '@example.test'}, true, ${overrides.role ?? 'user'})`.execute(db);
  return id;
}

export interface MetricSpec {
  slug: string;
  kind: 'fixed' | 'rolling';
  /** Tier quota: a number, null (unlimited), or 'none' for no quota row (deny). */
  quota: number | null | 'none';
}

export interface MeteredAgent {
  agentId: string;
  tierId: string;
  metrics: Record<string, string>;
}

/** An agent with one free tier and the given metrics and quotas. */
export async function meteredAgent(db: Db, metrics: MetricSpec[]): Promise<MeteredAgent> {
  const agent = await insertAgent(db);
  const tier = await insertTier(db, agent.id);
  const ids: Record<string, string> = {};
  for (const m of metrics) {
    const [row] = (
      await sql<{ id: string }>`insert into metric_definitions (agent_id, slug, name, kind)
                                values (${agent.id}, ${m.slug}, ${m.slug}, ${m.kind}) returning id`.execute(db)
    ).rows;
    ids[m.slug] = row!.id;
    if (m.quota !== 'none') await setQuota(db, tier.id, row!.id, m.quota);
  }
  return { agentId: agent.id, tierId: tier.id, metrics: ids };
}

export async function setQuota(db: Db, tierId: string, metricId: string, quota: number | null): Promise<void> {
  await sql`insert into tier_quotas (tier_id, metric_id, quota_limit) values (${tierId}, ${metricId}, ${quota})
            on conflict (tier_id, metric_id) do update set quota_limit = excluded.quota_limit`.execute(db);
}

export async function subscribe(t: TestApp, userId: string, tierId: string): Promise<SubscriptionDto> {
  return (await startFreeSubscription(t.db, t.clock, { userId, tierId })).subscription;
}

/** Path of a usage operation. */
export const usagePath = (agentId: string, slug?: string, op?: 'increment' | 'decrement') =>
  `/me/usage/${agentId}${slug ? `/${slug}` : ''}${op ? `/${op}` : ''}`;

let seq = 0;
/** A fresh clientReqId. */
export const reqId = () => `req-${process.pid}-${++seq}-${randomUUID().slice(0, 8)}`;

/** sum(delta) of the ledger per counter, next to the counter itself: they must agree. */
export async function ledgerAgreesWithCounters(db: Db, subscriptionId: string): Promise<Array<{ used: number; sum: number }>> {
  const { rows } = await sql<{ used: number; sum: number }>`
    select c.used::int as used, coalesce((
      select sum(l.delta) from quota_ledger l
      where l.subscription_id = c.subscription_id and l.metric_id = c.metric_id
        and (c.period_start = '-infinity' or l.period_start = c.period_start)), 0)::int as sum
    from usage_counters c where c.subscription_id = ${subscriptionId}`.execute(db);
  return rows;
}

const agentTokens = new WeakMap<TestApp, Map<string, Promise<string>>>();

/**
 * The user's access token at this agent, from the real OAuth flow with the agent's own client (usage writes take
 * only that: contract.md, Trust boundaries). One per (app, user, agent).
 */
export function agentToken(t: TestApp, user: TestUser, agentId: string): Promise<string> {
  let byKey = agentTokens.get(t);
  if (!byKey) agentTokens.set(t, (byKey = new Map()));
  const key = `${user.userId}|${agentId}`;
  let token = byKey.get(key);
  if (!token) {
    token = accessTokenFor(t, user, { agentId }).then((set) => set.accessToken);
    byKey.set(key, token);
    token.catch(() => byKey!.delete(key));
  }
  return token;
}

/** POST increment or decrement as the agent's backend does: the user's bearer token of that agent's client. */
export async function meter(
  t: TestApp,
  user: TestUser,
  agentId: string,
  slug: string,
  op: 'increment' | 'decrement',
  body: Record<string, unknown> = {},
) {
  return t.http.post(usagePath(agentId, slug, op), { bearer: await agentToken(t, user, agentId), json: body });
}
