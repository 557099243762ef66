import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import { insertTier } from '../support/fixtures.ts';
import type { CallResult } from '../support/http.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { agentToken, ledgerAgreesWithCounters, meter, meteredAgent, reqId, setQuota, subscribe, type MeteredAgent } from './support.ts';
import { reserve } from './reservation-support.ts';

/**
 * An increment or a hold that waited for its counter is judged by the tier the subscription is on when it counts
 * (migration 20261127003800; found by review 20: it was admitted against the quota of a tier the subscription had left).
 *
 * metering_increment and metering_reserve read the subscription's tier_id in their first statement, before they take
 * the counter's row lock, and judged with it. docs/internals/metering.md: "no increment is ever admitted against a
 * quota that was already lowered". A tier change (an admin's change-tier, a downgrade Stripe applies, written by the
 * webhook) takes no counter lock. Each test holds the counter (as any other batch on it does) while the call is on
 * its way, moves the subscription to a tier with a quota of 1 (1 used already), and lets the call go. PostgreSQL only:
 * the interleaving needs a connection of the test's own.
 */
let t: TestApp;
let locker: postgres.Sql;
let admin: TestUser;
let agent: MeteredAgent;
let smallTierId: string;

beforeAll(async () => {
  t = await startTestApp({ now: '2026-03-10T12:00:00.000Z' });
  locker = postgres(t.databaseUrl!, { max: 1, onnotice: () => {} });
  admin = await createAdmin(t);
  agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 10 }]);
  smallTierId = (await insertTier(t.db, agent.agentId)).id;
  await setQuota(t.db, smallTierId, agent.metrics.calls!, 1);
}, 60_000);

afterAll(async () => {
  await locker?.end({ timeout: 1 });
  await t?.close();
});

/** A subscriber on the big tier (quota 10) who has used 1. */
async function subscriber() {
  const user = await signUp(t);
  const subscriptionId = (await subscribe(t, user.userId, agent.tierId)).id as string;
  await agentToken(t, user, agent.agentId);
  expect((await meter(t, user, agent.agentId, 'calls', 'increment', { clientReqId: reqId() })).status).toBe(200);
  return { user, subscriptionId };
}

/** Sends `call` while the test holds the counter, moves the subscription to the small tier, then lets the call go. */
async function besideTierChange(subscriptionId: string, call: () => Promise<CallResult>): Promise<CallResult> {
  const holder = await holdOpen(locker, async (tx) => {
    await tx`select 1 from usage_counters where subscription_id = ${subscriptionId} for update`;
  });
  let sent: Promise<CallResult> | undefined;
  try {
    sent = call();
    await eventually('the call waits for the counter', async () => (await statementsWaitingForLock(t.db, '%metering_batch_as_bearer%')) >= 1);
    const changed = await t.http.post(`/admin/subscriptions/${subscriptionId}/change-tier`, { cookie: admin.cookie, json: { tierId: smallTierId } });
    expect(changed.status, changed.text).toBe(200);
    expect((changed.body as { data: { tierId: string } }).data.tierId).toBe(smallTierId);
  } finally {
    await holder.release();
  }
  return sent!;
}

describe('a tier change while a usage call waits for its counter', () => {
  it('attack: the increment is judged by the new tier (429, nothing counted), not the one it started under', async () => {
    const { user, subscriptionId } = await subscriber();
    const answer = await besideTierChange(subscriptionId, () => meter(t, user, agent.agentId, 'calls', 'increment', { clientReqId: reqId() }));
    const counters = await ledgerAgreesWithCounters(t.db, subscriptionId);
    expect({ status: answer.status, used: counters[0]!.used }, answer.text).toEqual({ status: 429, used: 1 });
  }, 60_000);

  it('attack: the hold is judged by the new tier (429, nothing held)', async () => {
    const { user, subscriptionId } = await subscriber();
    const answer = await besideTierChange(subscriptionId, () => reserve(t, user, agent.agentId, 'calls', { clientReqId: reqId(), amount: 1 }));
    const counters = await ledgerAgreesWithCounters(t.db, subscriptionId);
    expect({ status: answer.status, used: counters[0]!.used, code: answer.body?.error?.code }, answer.text).toEqual({
      status: 429,
      used: 1,
      code: 'QUOTA_EXCEEDED',
    });
  }, 60_000);
});
