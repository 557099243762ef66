import { accessTokenFor } from '../support/oauth.ts';
import { randomUUID } from 'node:crypto';
import { first, sql } from '../../functions/platform/db.ts';
import type { TestApp } from '../support/app.ts';
import { insertAgent, insertTier, type AgentRow, type TierRow } from '../support/fixtures.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * A marketplace with known answers, shared by the admin tests and the admin page's browser test.
 *
 * Window W: from 2026-09-07T00:00:00.000Z (a Monday) to 2026-11-01T12:00:00.000Z (a Sunday), both inclusive.
 * The last 30 days of W start at 2026-10-02T12:00:00.000Z. Weeks (Mondays): Sep 7, 14, 21, 28, Oct 5, 12, 19, 26.
 *
 *   sub  user agent tier          created                 status     canceled      activity
 *   s0   u1   alpha alpha-pro     2026-08-01              active                   -                (before W)
 *   s0c  u2   beta  beta-pro      2026-08-10              canceled   2026-09-10    -                (before W)
 *   s8   u6   alpha alpha-pro     2026-09-01              active                   increment Oct 20 (before W)
 *   s1   u1   beta  beta-free     = from (Sep 7 00:00)    active                   increment exactly at to - 30 days
 *   s2   u2   alpha alpha-yearly  2026-09-15              active                   increment Sep 20 (too old for "used")
 *   s6   u6   beta  beta-pro      2026-09-30              incomplete               -                (never counted)
 *   s7   u5   beta  beta-pro      2026-10-01              active                   increment 1 ms before to - 30 days; a denied increment Oct 20
 *   s4   u4   alpha alpha-free    2026-10-10              canceled   2026-10-20    install of alpha Oct 10 (over HTTP)
 *   s5   u5   alpha alpha-pro     2026-10-12              past_due                 increment Oct 25 (over HTTP)
 *   s3   u3   alpha alpha-pro     = to (Nov 1 12:00)      active                   increment and install 1 ms after to
 *   s3b  u3   beta  beta-pro      to + 1 ms               active                   -                (after W)
 *
 * Known answers for W:
 *   funnel: purchased 6 (s1 s2 s3 s4 s5 s7), activated 5 (all but s3), used 2 (s1 s5)
 *   alpha: 4 / 3 / 1 (s2 s3 s4 s5)        beta: 2 / 2 / 1 (s1 s7)
 *   trends: new        1 1 0 1 1 1 0 1
 *           canceled   1 0 0 0 0 0 1 0
 *           active     3 4 4 5 6 7 6 7     (3 live before W: s0 s0c s8)
 *   alpha only: active 2 3 3 3 4 5 4 5, new 0 1 0 0 1 1 0 1, canceled 0 0 0 0 0 0 1 0
 * A date-only to=2026-11-01 includes the whole day, so s3b counts too: purchased 7.
 *
 * Users (live subscriptions / monthly spend in cents):
 *   u1 2 / 2000 (alpha-pro; beta-free is free)      u2 1 / 1658 (19900 a year / 12; beta-pro canceled)
 *   u3 2 / 3500                                     u4 0 / 0 (only a canceled free one)
 *   u5 2 / 3500 (past_due still pays)               u6 2 / 2000 (incomplete beta-pro pays nothing yet)
 */

export const FROM = '2026-09-07T00:00:00.000Z';
export const TO = '2026-11-01T12:00:00.000Z';
export const NOW = '2026-11-20T09:00:00.000Z';
export const WEEKS = ['2026-09-07', '2026-09-14', '2026-09-21', '2026-09-28', '2026-10-05', '2026-10-12', '2026-10-19', '2026-10-26'];

const ms = (iso: string, delta = 0) => new Date(new Date(iso).getTime() + delta);

export interface Scenario {
  alpha: AgentRow;
  beta: AgentRow;
  tiers: Record<'alphaFree' | 'alphaPro' | 'alphaYearly' | 'betaFree' | 'betaPro', TierRow>;
  users: Record<'u1' | 'u2' | 'u3' | 'u4' | 'u5' | 'u6', TestUser>;
  subs: Record<string, string>;
}

export async function seedScenario(t: TestApp): Promise<Scenario> {
  const tag = randomUUID().slice(0, 6);
  const alpha = await insertAgent(t.db, { slug: `alpha-${tag}`, name: 'Alpha' });
  const beta = await insertAgent(t.db, { slug: `beta-${tag}`, name: 'Beta' });
  const tiers = {
    alphaFree: await insertTier(t.db, alpha.id, { name: 'Free', priceCents: 0 }),
    alphaPro: await insertTier(t.db, alpha.id, { name: 'Pro', priceCents: 2000 }),
    alphaYearly: await insertTier(t.db, alpha.id, { name: 'Pro yearly', priceCents: 19900, interval: 'year' }),
    betaFree: await insertTier(t.db, beta.id, { name: 'Free', priceCents: 0 }),
    betaPro: await insertTier(t.db, beta.id, { name: 'Pro', priceCents: 1500 }),
  };
  const users = {
    u1: await signUp(t, { name: 'Ada One', email: `ada.one-${tag}@example.test` }),
    u2: await signUp(t, { name: 'Bob Two', email: `bob.two-${tag}@example.test` }),
    u3: await signUp(t, { name: 'Cy Three', email: `cy.three-${tag}@example.test` }),
    u4: await signUp(t, { name: 'Di Four', email: `di.four-${tag}@example.test` }),
    u5: await signUp(t, { name: 'Ed Five', email: `ed.five-${tag}@example.test` }),
    u6: await signUp(t, { name: 'Flo Six', email: `flo.six-${tag}@example.test` }),
  };

  // One metric per agent, unlimited on every tier, so increments over HTTP are admitted.
  const metric: Record<string, string> = {};
  for (const agent of [alpha, beta]) {
    const row = await first<{ id: string }>(
      t.db,
      sql`insert into public.metric_definitions (agent_id, slug, name, kind) values (${agent.id}, 'runs', 'Runs', 'fixed') returning id`,
    );
    metric[agent.id] = row!.id;
  }
  for (const tier of Object.values(tiers)) {
    await sql`insert into public.tier_quotas (tier_id, metric_id, quota_limit) values (${tier.id}, ${metric[tier.agentId]!}, null)`.execute(t.db);
  }

  const subs: Record<string, string> = {};
  const subscribe = async (
    key: string,
    user: TestUser,
    tier: TierRow,
    createdAt: Date,
    status: 'active' | 'past_due' | 'canceled' | 'incomplete' = 'active',
    canceledAt: Date | null = null,
  ) => {
    const end = new Date(createdAt.getTime() + 30 * 86_400_000);
    // A canceled row here stands for a subscription that was live until it was canceled (it granted access); an
    // incomplete one for a first payment that never came.
    const row = await first<{ id: string }>(
      t.db,
      sql`insert into public.subscriptions (user_id, agent_id, tier_id, status, current_period_start, current_period_end,
                                            canceled_at, stripe_subscription_id, created_at, updated_at, granted_access)
          values (${user.userId}, ${tier.agentId}, ${tier.id}, ${status}, ${createdAt}, ${end}, ${canceledAt},
                  ${tier.priceCents > 0 ? `sub_${key}_${tag}` : null}, ${createdAt}, ${canceledAt ?? createdAt}, ${status !== 'incomplete'})
          returning id`,
    );
    subs[key] = row!.id;
  };
  const increment = async (key: string, at: Date, event: 'increment' | 'increment_denied' = 'increment') => {
    const sub = subs[key]!;
    await sql`insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, client_req_id, created_at)
              select public.quota_ledger_id(${at}::timestamptz), s.id, m.id, ${event}, 1, ${event === 'increment' ? 1 : 0}, 1,
                     ${randomUUID()}, ${at}
              from public.subscriptions s join public.metric_definitions m on m.agent_id = s.agent_id
              where s.id = ${sub}`.execute(t.db);
  };
  const install = async (agent: AgentRow, user: TestUser, at: Date) => {
    await sql`insert into public.agent_installs (agent_id, user_id, created_at) values (${agent.id}, ${user.userId}, ${at})`.execute(t.db);
  };

  await subscribe('s0', users.u1, tiers.alphaPro, ms('2026-08-01T10:00:00Z'));
  await subscribe('s0c', users.u2, tiers.betaPro, ms('2026-08-10T10:00:00Z'), 'canceled', ms('2026-09-10T00:00:00Z'));
  await subscribe('s8', users.u6, tiers.alphaPro, ms('2026-09-01T10:00:00Z'));
  await subscribe('s1', users.u1, tiers.betaFree, ms(FROM));
  await subscribe('s2', users.u2, tiers.alphaYearly, ms('2026-09-15T10:00:00Z'));
  await subscribe('s6', users.u6, tiers.betaPro, ms('2026-09-30T10:00:00Z'), 'incomplete');
  await subscribe('s7', users.u5, tiers.betaPro, ms('2026-10-01T10:00:00Z'));
  await subscribe('s4', users.u4, tiers.alphaFree, ms('2026-10-10T10:00:00Z'));
  await subscribe('s5', users.u5, tiers.alphaPro, ms('2026-10-12T10:00:00Z'), 'past_due');
  await subscribe('s3', users.u3, tiers.alphaPro, ms(TO));
  await subscribe('s3b', users.u3, tiers.betaPro, ms(TO, 1));

  await increment('s8', ms('2026-10-20T10:00:00Z'));
  await increment('s1', ms(TO, -30 * 86_400_000));
  await increment('s2', ms('2026-09-20T10:00:00Z'));
  await increment('s7', ms(TO, -30 * 86_400_000 - 1));
  await increment('s7', ms('2026-10-20T10:00:00Z'), 'increment_denied');
  await increment('s3', ms(TO, 1));
  await install(alpha, users.u3, ms(TO, 1));

  // Through the real endpoints, at the scenario's dates: u4 installs alpha, then later cancels the free plan;
  // u5 records a run on alpha.
  t.clock.set('2026-10-10T11:00:00Z');
  const installed = await t.http.post(`/agents/${alpha.id}/install`, { cookie: users.u4.cookie });
  if (installed.status !== 200) throw new Error(`install failed: ${installed.status} ${installed.text}`);
  t.clock.set('2026-10-20T00:00:00Z');
  const canceled = await t.http.post(`/me/subscriptions/${alpha.id}/cancel`, { cookie: users.u4.cookie });
  if (canceled.status !== 200) throw new Error(`cancel failed: ${canceled.status} ${canceled.text}`);
  t.clock.set('2026-10-25T10:00:00Z');
  // as alpha's backend does it: u5's token of alpha's own client (usage writes take nothing else)
  const { accessToken } = await accessTokenFor(t, users.u5, { agentId: alpha.id });
  const used = await t.http.post(`/me/usage/${alpha.id}/runs/increment`, { bearer: accessToken, json: { clientReqId: 'run-1' } });
  if (used.status !== 200) throw new Error(`increment failed: ${used.status} ${used.text}`);
  t.clock.set(NOW);

  return { alpha, beta, tiers, users, subs };
}
