import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { meteredAgent } from '../metering/support.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { addEndpoint, deliveries, drain, passBackoff, Receiver } from './support.ts';

/**
 * An endpoint given a new url, or enabled again, starts a fresh run: its pending deliveries are due at the next drain,
 * their retry delays starting over. Only their 24 and 72 hours were restarted: the delay the old url had earned (up to
 * 2 hours after a few hours of failures) still held the backlog from the agent's working receiver, and an admin could
 * not hurry it (a pending delivery cannot be redelivered); a first failure at the new url then waited as long again
 * (found by review 44).
 */
let t: TestApp;
let admin: TestUser;
let dead: Receiver;
let fixed: Receiver;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  dead = await Receiver.start('/old');
  fixed = await Receiver.start('/new');
});
afterAll(async () => {
  await dead?.close();
  await fixed?.close();
  await t?.close();
});

/** An endpoint at the dead receiver with one delivery that has failed 12 times (its next try 1 to 2 hours away). */
async function failingForHours() {
  const agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
  const endpoint = await addEndpoint(t, admin, agent.agentId, dead, ['subscription.created']);
  fixed.secrets = dead.secrets;
  dead.mode = { status: 503 };
  const user = await signUp(t);
  const res = await t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: agent.tierId } });
  expect(res.status, res.text).toBe(201);
  for (let i = 0; i < 12; i++) {
    await passBackoff(t, endpoint.id);
    expect(await drain(t)).toMatchObject({ attempted: 1, retrying: 1, failed: 0 });
  }
  const [pending] = await deliveries(t, admin, agent.agentId, endpoint.id);
  expect(Date.parse(pending!.nextAttemptAt) - t.clock.now().getTime()).toBeGreaterThan(30 * 60_000);
  return { agent, endpoint };
}

const patch = (agentId: string, webhookId: string, json: Record<string, unknown>) =>
  t.http.patch(`/admin/agents/${agentId}/webhooks/${webhookId}`, { cookie: admin.cookie, json });

// (The injected clock runs hours ahead of the receivers' own, so they refuse the messages' timestamps as too new: what
// is checked here is when the drain sends, not what the receiver makes of it; delivery.test.ts checks that.)
describe('an endpoint that starts a fresh run', () => {
  it('given a new url: the next drain sends the backlog there, and a failure there is retried within a minute', async () => {
    const { agent, endpoint } = await failingForHours();
    const sentBefore = fixed.received.length;
    const moved = await patch(agent.agentId, endpoint.id, { url: fixed.url });
    expect(moved.status, moved.text).toBe(200);

    expect(await drain(t)).toMatchObject({ attempted: 1, retrying: 1 });
    expect(fixed.received.length).toBe(sentBefore + 1);
    const [retrying] = await deliveries(t, admin, agent.agentId, endpoint.id);
    expect(retrying!.attempts).toBe(1);
    expect(Date.parse(retrying!.nextAttemptAt) - t.clock.now().getTime()).toBeLessThan(60_000);
    // (its backlog dropped, so the next test's drains see only their own)
    expect((await t.http.delete(`/admin/agents/${agent.agentId}/webhooks/${endpoint.id}`, { cookie: admin.cookie })).status).toBe(200);
  });

  it('enabled again: the next drain sends the backlog', async () => {
    const { agent, endpoint } = await failingForHours();
    expect((await patch(agent.agentId, endpoint.id, { enabled: false })).status).toBe(200);
    const sentBefore = dead.received.length;
    expect((await patch(agent.agentId, endpoint.id, { enabled: true })).status).toBe(200);

    expect(await drain(t)).toMatchObject({ attempted: 1 });
    expect(dead.received.length).toBe(sentBefore + 1);
  });
});
