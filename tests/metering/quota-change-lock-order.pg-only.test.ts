import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, eventually, holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, type TestUser } from '../support/users.ts';
import { insertUser, meteredAgent, subscribe } from './support.ts';

/**
 * A quota change takes the usage counters in the order a usage batch takes them: by user, then period (migration
 * 20261127005100; the batch's order is agent, user, metric, period, 20261126001100). It took them by subscription id:
 * two subscribers of one tier whose subscription ids sort the other way from their user ids, both in a batch while an
 * admin lowered the tier's quota, each side holding one counter and waiting for the other, and PostgreSQL ended one
 * after deadlock_timeout (found by review 46).
 *
 * Made exact: a holder takes the later user's counter; the admin's change starts and waits; a transaction standing
 * for the batch takes the earlier user's counter and then the later one, as the batch function does; the holder lets
 * go. The stand-in gets deadlock_timeout 60 s and the app's connections 1 s (the database's), so in a deadlock the
 * admin's request is the one ended (503).
 *
 * And a quota set while its metric is deleted waits for the deletion and finds the metric gone (review 72: its write's
 * foreign key found it gone, a 500).
 */
let t: TestApp;
let holder: postgres.Sql;
let batch: postgres.Sql;
let admin: TestUser;
beforeAll(async () => {
  const testDatabase = await createTestDatabase();
  holder = postgres(testDatabase.url!, { max: 1, onnotice: () => {} });
  batch = postgres(testDatabase.url!, { max: 1, onnotice: () => {} });
  const [row] = await holder<{ name: string }[]>`select current_database() as name`;
  await holder.unsafe(`alter database ${row!.name} set deadlock_timeout = '1s'`);
  t = await startTestApp({ testDatabase });
  admin = await createAdmin(t);
});
afterAll(async () => {
  await holder?.end();
  await batch?.end();
  await t?.close();
});

it("lowering a tier's quota while a usage batch holds its subscribers' counters waits for it, with no deadlock", async () => {
  const agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 100 }]);
  const metricId = agent.metrics.calls!;
  const quotaPath = `/agents/${agent.agentId}/pricing/${agent.tierId}/quotas/${metricId}`;
  // Two subscribers whose subscription ids sort the other way from their user ids.
  const subscribers: Array<{ userId: string; subscriptionId: string }> = [];
  let pair: [typeof subscribers[number], typeof subscribers[number]] | undefined;
  while (!pair) {
    const userId = await insertUser(t.db);
    subscribers.push({ userId, subscriptionId: (await subscribe(t, userId, agent.tierId)).id });
    for (const a of subscribers) {
      for (const b of subscribers) if (a.userId < b.userId && a.subscriptionId > b.subscriptionId) pair = [a, b];
    }
  }
  const [earlier, later] = pair;
  // A first change writes every subscriber's counter.
  expect((await t.http.put(quotaPath, { cookie: admin.cookie, json: { quotaLimit: 90 } })).status).toBe(200);
  const lockCounter = (sql: postgres.Sql | postgres.TransactionSql, subscriptionId: string) =>
    sql`select 1 from public.usage_counters where subscription_id = ${subscriptionId} and metric_id = ${metricId} for update`;

  const held = await holdOpen(holder, (tx) => lockCounter(tx, later.subscriptionId));
  const change = t.http.put(quotaPath, { cookie: admin.cookie, json: { quotaLimit: 80 } });
  await eventually('the change waits for a counter', async () => (await statementsWaitingForLock(t.db, '%metering_lock_counters%')) > 0);
  const batchDone = batch.begin(async (tx) => {
    await tx`set local deadlock_timeout = '60s'`;
    await lockCounter(tx, earlier.subscriptionId);
    await lockCounter(tx, later.subscriptionId);
  });
  await eventually('the batch waits for a counter', async () => (await statementsWaitingForLock(t.db, '%for update%')) > 0);
  await held.release();

  const changed = await change;
  expect(changed.status, changed.text).toBe(200);
  await batchDone;
  const quotas = await t.http.get(`/agents/${agent.agentId}/pricing/${agent.tierId}/quotas`);
  expect(quotas.body.data).toEqual(expect.arrayContaining([expect.objectContaining({ metricId, quotaLimit: 80 })]));
});

it('a quota set while its metric is being deleted answers 404 once the delete commits, not a 500 (review 72)', async () => {
  const agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 100 }]);
  const metricId = agent.metrics.calls!;
  // the metric's deletion under way (deleteMetricDefinition's statements), not yet committed
  const deletion = await holdOpen(holder, async (tx) => {
    await tx`select 1 from public.metric_definitions where id = ${metricId} for update`;
    await tx`delete from public.tier_quotas where metric_id = ${metricId}`;
    await tx`delete from public.metric_definitions where id = ${metricId}`;
  });
  const change = t.http.put(`/agents/${agent.agentId}/pricing/${agent.tierId}/quotas/${metricId}`, { cookie: admin.cookie, json: { quotaLimit: 5 } });
  await eventually('the quota change waits for the deletion', async () =>
    (await statementsWaitingForLock(t.db, '%metric_definitions%')) + (await statementsWaitingForLock(t.db, '%tier_quotas%')) > 0);
  await deletion.release();
  const changed = await change;
  expect(changed.status, changed.text).toBe(404);
  expect(changed.body.error.code).toBe('NOT_FOUND');
});
