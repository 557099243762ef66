import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
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
// Each test's endpoint is deleted after it, with its backlog, so the next test's drains see only their own.
const made: Array<{ agentId: string; webhookId: string }> = [];
afterEach(async () => {
  for (const { agentId, webhookId } of made.splice(0)) {
    const res = await t.http.delete(`/admin/agents/${agentId}/webhooks/${webhookId}`, { cookie: admin.cookie });
    expect(res.status, res.text).toBe(200);
  }
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
  made.push({ agentId: agent.agentId, webhookId: endpoint.id });
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
  });

  it('given a new url while an attempt to the old one is in flight: that failure does not hold the backlog from the new url', async () => {
    // Review 63: the PATCH could not queue again the delivery a drain held, and the old url's failure was then recorded
    // with the old url's backoff (its 13th attempt, next try 1 to 2 hours away) and began the new url's run of failures.
    const { agent, endpoint } = await failingForHours();
    await passBackoff(t, endpoint.id);
    dead.mode = 'hang';
    const arrivedBefore = dead.received.length;
    const inFlight = drain(t, { limit: 1 });
    await dead.arrived(arrivedBefore + 1);
    const moved = await patch(agent.agentId, endpoint.id, { url: fixed.url });
    expect(moved.status, moved.text).toBe(200);
    dead.release(500);
    expect(await inFlight).toMatchObject({ attempted: 1, retrying: 1 });
    dead.mode = { status: 503 };

    const [waiting] = await deliveries(t, admin, agent.agentId, endpoint.id);
    expect(waiting).toMatchObject({ status: 'pending', attempts: 0, lastStatusCode: 500 });
    expect(Date.parse(waiting!.nextAttemptAt)).toBeLessThanOrEqual(t.clock.now().getTime());
    const listed = await t.http.get(`/admin/agents/${agent.agentId}/webhooks`, { cookie: admin.cookie });
    expect(listed.status, listed.text).toBe(200);
    expect(listed.body.data).toEqual([expect.objectContaining({ id: endpoint.id, url: fixed.url, failingSince: null })]);
    expect(t.logs.some((l) => l.deliveryId === waiting!.id && /old url failed; its new url is tried/.test(String(l.msg)))).toBe(true);

    const sentBefore = fixed.received.length;
    expect(await drain(t)).toMatchObject({ attempted: 1 });
    expect(fixed.received.length).toBe(sentBefore + 1);
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
