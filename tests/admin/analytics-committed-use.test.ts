import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { commit, getReservation, release, reserve } from '../metering/reservation-support.ts';
import { meter, meteredAgent, reqId, subscribe } from '../metering/support.ts';

/**
 * A reservation's commit "records amount as used (an increment with the reservation's ledger row)" (contract.md,
 * Usage), and the funnel's activated and used are purchases "with at least one usage increment" (Administration).
 * Review 71: a subscriber of an agent that meters by hold and commit used it, and counted as never activated and never
 * used (the funnel read only `increment` ledger rows; migration 20261127005700). A hold released, or committed at 0,
 * used nothing.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-11-10T12:00:00Z' });
  admin = await createAdmin(t);
});
afterAll(() => t.close());

const funnelOf = async (agentId: string) => {
  const res = await t.http.get(`/admin/analytics?from=2026-11-01&to=2026-11-30&agentId=${agentId}`, { cookie: admin.cookie });
  expect(res.status, res.text).toBe(200);
  return res.body.data.funnel;
};

async function subscriber(agent: { tierId: string }) {
  const user = await signUp(t);
  await subscribe(t, user.userId, agent.tierId);
  return user;
}

describe('analytics: a committed hold is usage', () => {
  it('a subscriber who metered by increments is activated and used (the control)', async () => {
    const agent = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'rolling', quota: 100 }]);
    const user = await subscriber(agent);
    expect((await meter(t, user, agent.agentId, 'tokens', 'increment', { clientReqId: reqId(), amount: 5 })).status).toBe(200);
    expect(await funnelOf(agent.agentId)).toEqual({ purchased: 1, activated: 1, used: 1 });
  });

  it('attack (review 71): a subscriber who metered only by reserve and commit is activated and used too', async () => {
    const agent = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'rolling', quota: 100 }]);
    const user = await subscriber(agent);
    const held = await reserve(t, user, agent.agentId, 'tokens', { clientReqId: reqId(), amount: 5 });
    expect(held.status, held.text).toBe(201);
    const done = await commit(t, user, agent.agentId, held.body.data.id, 5);
    expect(done.status, done.text).toBe(200);
    expect((await t.http.get(`/me/usage/${agent.agentId}/tokens`, { cookie: user.cookie })).body.data.used).toBe(5);
    expect(await funnelOf(agent.agentId)).toEqual({ purchased: 1, activated: 1, used: 1 });
  });

  it('a hold released, committed at 0, or left to expire is no usage', async () => {
    const agent = await meteredAgent(t.db, [{ slug: 'tokens', kind: 'rolling', quota: 100 }]);
    const [released, zero, left] = [await subscriber(agent), await subscriber(agent), await subscriber(agent)];
    const hold = async (user: TestUser) => {
      const held = await reserve(t, user, agent.agentId, 'tokens', { clientReqId: reqId(), amount: 5 });
      expect(held.status, held.text).toBe(201);
      return held.body.data.id as string;
    };
    expect((await release(t, released, agent.agentId, await hold(released))).status).toBe(200);
    expect((await commit(t, zero, agent.agentId, await hold(zero), 0)).status).toBe(200);
    const expiring = await hold(left);
    t.clock.advance(2 * 3_600_000);
    // read once expired: the hold's `expired` ledger row is written then
    expect((await getReservation(t, left, agent.agentId, expiring)).body.data.status).toBe('expired');
    expect(await funnelOf(agent.agentId)).toEqual({ purchased: 3, activated: 0, used: 0 });
  });
});
