import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { meteredAgent, meter, reqId } from '../metering/support.ts';
import { eventually, holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import type { CallResult } from '../support/http.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { addEndpoint, deliveries, drain, Receiver } from './support.ts';

/**
 * An endpoint changed by an admin while a user's change emits an event for it (review 16). Each interleaving is made
 * exact with a connection of the test's own holding one side open: PostgreSQL only.
 *
 * 1. Deleted: public.webhook_emit inserted one delivery per endpoint it had read, and the insert's foreign key check
 *    waited for the deleting transaction and, once that committed, failed with 23503: the user's checkout or usage
 *    call answered 500 and was lost. The delete of an endpoint with a backlog cascades over its deliveries and takes
 *    a while, which is when an admin deletes a failing endpoint. Now the emit reads the endpoints FOR KEY SHARE
 *    (migration 20261127003300): it waits for the delete and writes no delivery for the endpoint once it is gone, or
 *    writes it when the delete rolls back.
 * 2. A type taken off (PATCH events): the PATCH fails the pending deliveries of that type it can see; one whose change
 *    commits while the PATCH runs it cannot, and the drain sent it. Now the drain's claim fails it unsent
 *    (functions/webhooks/drain.ts).
 */
let t: TestApp;
let admin: TestUser;
let other: postgres.Sql;
const receivers: Receiver[] = [];
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  other = postgres(t.databaseUrl!, { max: 1, onnotice: () => {} });
});
afterAll(async () => {
  await other?.end({ timeout: 1 });
  await Promise.all(receivers.splice(0).map((r) => r.close()));
  await t?.close();
});

async function receiver(): Promise<Receiver> {
  const r = await Receiver.start();
  receivers.push(r);
  return r;
}

const errorsLogged = () => JSON.stringify(t.logs.filter((l) => l.level === 'error').map((l) => (l.err as any)?.message ?? l.msg).slice(-2));

/** The endpoint's delete, in a transaction of the test's own left open until `end` commits or rolls it back. */
async function deleteHeldOpen(endpointId: string) {
  let end!: (commit: boolean) => void;
  const ended = new Promise<boolean>((resolve) => (end = resolve));
  let taken!: () => void;
  const isTaken = new Promise<void>((resolve) => (taken = resolve));
  const holder = other
    .begin(async (tx) => {
      await tx`delete from public.webhook_endpoints where id = ${endpointId}`;
      taken();
      if (!(await ended)) throw new Error('rolled back');
    })
    .catch((err: Error) => {
      if (err.message !== 'rolled back') throw err;
    });
  await Promise.race([isTaken, holder]);
  return {
    async finish(commit: boolean) {
      end(commit);
      await holder;
    },
  };
}

describe('an endpoint deleted while an event for it is written', () => {
  /** A free checkout sent while the endpoint's delete is open; the delete then commits or rolls back. */
  async function checkoutDuringDelete(commit: boolean) {
    const agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const hook = await receiver();
    const endpoint = await addEndpoint(t, admin, agent.agentId, hook, ['subscription.created']);
    const user = await signUp(t, { verified: true });
    const held = await deleteHeldOpen(endpoint.id);
    let checkout: Promise<CallResult> | undefined;
    try {
      checkout = t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: agent.tierId } });
      await eventually('the checkout waits for the endpoint row', async () => (await statementsWaitingForLock(t.db, '%subscriptions%')) >= 1);
    } finally {
      await held.finish(commit);
    }
    const res = await checkout!;
    return { agent, hook, endpoint, user, res };
  }

  it('attack on the subscriber: a free checkout made while the endpoint is being deleted succeeds and is kept', async () => {
    const { agent, hook, endpoint, user, res } = await checkoutDuringDelete(true);
    expect(res.status, res.text + ' ' + errorsLogged()).toBe(201);
    const sub = await first<{ n: number }>(
      t.db,
      sql`select count(*)::int as n from public.subscriptions where user_id = ${user.userId} and agent_id = ${agent.agentId} and status = 'active'`,
    );
    expect(sub!.n).toBe(1);
    // nothing was written for the deleted endpoint, and nothing is sent
    const left = await first<{ deliveries: number; events: number }>(
      t.db,
      sql`select (select count(*)::int from public.webhook_deliveries where endpoint_id = ${endpoint.id}) as deliveries,
                 (select count(*)::int from public.webhook_events where agent_id = ${agent.agentId}) as events`,
    );
    expect(left).toEqual({ deliveries: 0, events: 0 });
    await drain(t);
    expect(hook.received).toHaveLength(0);
  });

  it('a delete that rolls back leaves the endpoint its delivery', async () => {
    const { agent, hook, endpoint, res } = await checkoutDuringDelete(false);
    expect(res.status, res.text + ' ' + errorsLogged()).toBe(201);
    hook.mode = { status: 200 };
    await drain(t);
    expect(hook.accepted().map((p) => [p.type, p.data.id])).toEqual([['subscription.created', res.body.data.subscription.id]]);
    expect((await deliveries(t, admin, agent.agentId, endpoint.id)).map((d) => d.status)).toEqual(['delivered']);
  });

  it('attack on the agent backend: an increment that crosses 80 % while the endpoint is being deleted is counted', async () => {
    const agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const hook = await receiver();
    const user = await signUp(t, { verified: true });
    const started = await t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: agent.tierId } });
    expect(started.status, started.text).toBe(201);
    const endpoint = await addEndpoint(t, admin, agent.agentId, hook, ['usage.threshold_reached']);

    const held = await deleteHeldOpen(endpoint.id);
    let call: Promise<CallResult> | undefined;
    try {
      call = meter(t, user, agent.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 8 });
      await eventually('the increment waits for the endpoint row', async () => (await statementsWaitingForLock(t.db, '%metering%')) >= 1);
    } finally {
      await held.finish(true);
    }
    const res = await call!;
    expect(res.status, res.text + ' ' + errorsLogged()).toBe(200);
    expect(res.body.data).toMatchObject({ used: 8, limit: 10 });
    // counted: the next call sees it
    const next = await meter(t, user, agent.agentId, 'calls', 'increment', { clientReqId: reqId(), amount: 1 });
    expect(next.body.data).toMatchObject({ used: 9 });
  });
});

describe('a type taken off an endpoint while a change of that type commits', () => {
  it('attack on the agent backend: no event of a type the endpoint no longer lists is sent after the PATCH answered', async () => {
    const agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
    const hook = await receiver();
    const user = await signUp(t, { verified: true });
    const started = await t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: agent.tierId } });
    expect(started.status, started.text).toBe(201);
    const subscriptionId = started.body.data.subscription.id as string;
    const endpoint = await addEndpoint(t, admin, agent.agentId, hook, ['subscription.updated', 'subscription.canceled']);

    // a writer's transaction changes the subscription (its trigger emits subscription.updated) and is still open
    // while the PATCH runs; it commits after the PATCH answered
    const open = await holdOpen(other, (tx) => tx`update public.subscriptions set cancel_at_period_end = true, updated_at = now() where id = ${subscriptionId}`);
    let patched;
    try {
      patched = await t.http.patch(`/admin/agents/${agent.agentId}/webhooks/${endpoint.id}`, {
        cookie: admin.cookie,
        json: { events: ['subscription.canceled'] },
      });
    } finally {
      await open.release();
    }
    expect(patched.status, patched.text).toBe(200);
    expect(patched.body.data.events).toEqual(['subscription.canceled']);

    // the user cancels afterwards: that event, of a type the endpoint lists, goes out; the other never does
    const canceled = await t.http.post(`/me/subscriptions/${agent.agentId}/cancel`, { cookie: user.cookie });
    expect(canceled.status, canceled.text).toBe(200);
    hook.mode = { status: 200 };
    expect(await drain(t)).toMatchObject({ delivered: 1, failed: 1 });
    expect(hook.received.map((r) => r.payload?.type)).toEqual(['subscription.canceled']);
    const listed = await deliveries(t, admin, agent.agentId, endpoint.id);
    // (sorted by type: the writer's change is dated by the database's clock, the cancel by the test's)
    expect(listed.map((d) => [d.eventType, d.status, d.attempts, d.lastError]).sort()).toEqual([
      ['subscription.canceled', 'delivered', 1, null],
      ['subscription.updated', 'failed', 0, 'not sent: its event type was taken off the endpoint before it went out'],
    ]);
  });
});
