import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { meter, meteredAgent, reqId, type MeteredAgent } from '../metering/support.ts';

/**
 * A free plan canceled and started again in the same month is one purchase (migration 20261127005400, review 61): the
 * restart continues the subscription it follows (same cycle, the counters go on), yet each one counted as a new
 * purchase and the cancel before it as churn, so any account could add 50 purchases and 50 cancellations a day (its
 * checkout allowance) to any agent with a free tier, with its cookie only.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-03-10T12:00:00Z' });
  admin = await createAdmin(t);
});
afterAll(() => t?.close());

async function numbers(agentId: string, from: string, to: string) {
  const res = await t.http.get(`/admin/analytics?from=${from}&to=${to}&agentId=${agentId}`, { cookie: admin.cookie });
  expect(res.status, res.text).toBe(200);
  const { funnel, trends } = res.body.data as {
    funnel: { purchased: number; activated: number; used: number };
    trends: Array<{ newSubscriptions: number; cancellations: number; active: number }>;
  };
  return {
    ...funnel,
    newSubscriptions: trends.reduce((n, r) => n + r.newSubscriptions, 0),
    cancellations: trends.reduce((n, r) => n + r.cancellations, 0),
    activeAtEnd: trends.at(-1)!.active,
  };
}

const start = async (user: TestUser, agent: MeteredAgent) => {
  const res = await t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: agent.tierId } });
  expect(res.status, res.text).toBe(201);
};
const cancel = async (user: TestUser, agent: MeteredAgent) => {
  const res = await t.http.post(`/me/subscriptions/${agent.agentId}/cancel`, { cookie: user.cookie });
  expect(res.status, res.text).toBe(200);
};

describe('analytics and free plans started again', () => {
  it('attack: one user canceling and starting a free plan again five times in a month is one purchase, no churn, and its usage activates it', async () => {
    const agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 100 }]);
    const user = await signUp(t, { verified: true });
    await start(user, agent);
    for (let i = 0; i < 5; i++) {
      t.clock.advance(60_000);
      await cancel(user, agent);
      t.clock.advance(60_000);
      await start(user, agent);
    }
    // Used on the last restart only: it is the purchase's usage.
    const used = await meter(t, user, agent.agentId, 'calls', 'increment', { clientReqId: reqId() });
    expect(used.status, used.text).toBe(200);
    expect(await numbers(agent.agentId, '2026-03-01', '2026-03-31')).toEqual({
      purchased: 1,
      activated: 1,
      used: 1,
      newSubscriptions: 1,
      cancellations: 0,
      activeAtEnd: 1,
    });
  });

  it('a cancel not followed by a restart is churn; a free plan taken again in a later month is a new purchase', async () => {
    t.clock.set('2026-05-05T12:00:00Z');
    const agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 100 }]);
    const user = await signUp(t, { verified: true });
    await start(user, agent);
    t.clock.advance(60_000);
    await cancel(user, agent);
    expect(await numbers(agent.agentId, '2026-05-01', '2026-05-31')).toMatchObject({ purchased: 1, newSubscriptions: 1, cancellations: 1, activeAtEnd: 0 });
    // Back in June, past the month the cancel was in: its counters start again, and so does the count.
    t.clock.set('2026-06-20T12:00:00Z');
    await start(user, agent);
    expect(await numbers(agent.agentId, '2026-05-01', '2026-05-31')).toMatchObject({ purchased: 1, cancellations: 1, activeAtEnd: 0 });
    expect(await numbers(agent.agentId, '2026-06-01', '2026-06-30')).toMatchObject({ purchased: 1, newSubscriptions: 1, cancellations: 0, activeAtEnd: 1 });
  });
});
