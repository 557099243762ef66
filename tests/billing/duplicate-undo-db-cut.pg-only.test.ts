import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../../functions/platform/db.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';
import { startTcpProxy, throughProxy, type TcpProxy } from '../support/tcp-proxy.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, deliver, paidTier, startBillingWorld, type BillingWorld } from '../billing/support.ts';

/**
 * Review 118. A duplicate paid subscription (duplicate-purchases.ts) is undone at Stripe, and a failure is retried by
 * Stripe's redelivery of the event. The event was recorded with the `conflict` and un-recorded by a DELETE when the
 * undo failed; with the database connection lost mid-undo that DELETE failed too, the webhook answered 503 with the
 * event recorded, and the redelivery answered 200 `duplicate` and did nothing: the duplicate was never refunded nor
 * canceled (Stripe charging on), or, when the kept one was the unpaid one and had been ended, the paid purchase was
 * never written. Now the event is recorded only once the undo is done (migration 20261127007400).
 */
let w: BillingWorld;
let proxy: TcpProxy;
let direct: TestDatabase;
beforeAll(async () => {
  direct = await createTestDatabase();
  const url = new URL(direct.url!);
  proxy = await startTcpProxy({ host: url.hostname, port: Number(url.port) });
  const proxied = throughProxy(direct.url!, proxy);
  const database = openPostgres(proxied, { max: 10 });
  w = await startBillingWorld({ testDatabase: { database, url: proxied, drop: () => database.close({ graceSeconds: 1 }) } });
});
afterAll(async () => {
  await w?.close();
  await w?.t.database.close({ graceSeconds: 1 });
  await proxy?.close();
  await direct?.drop();
});

describe('a duplicate purchase whose undo meets a database outage', () => {
  it('is still undone when Stripe redelivers the event after the outage (not answered 200 "duplicate" with the buyer charged twice)', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 2500 });
    const user = await signUp(w.t);
    const open = async () => (await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } })).body.data.sessionId as string;
    const [s1, s2] = [await open(), await open()];
    const kept = w.fake.completeCheckout(s1).id as string;
    await deliver(w, w.fake.takeEvents());
    const duplicate = w.fake.completeCheckout(s2).id as string;
    const created = w.fake.takeEvents().find((e) => e.type === 'customer.subscription.created')!;

    // The undo re-reads the kept subscription at Stripe; the database goes away while Stripe answers.
    const held = w.fake.hold(`GET /v1/subscriptions/${kept}`);
    const inFlight = w.fake.deliver(w.webhookUrl, created);
    await held.reached;
    proxy.down();
    held.release();
    const failed = await inFlight;
    expect(failed.status).toBe(503);
    await proxy.up();

    // Stripe redelivers the event once the database is back.
    let redelivered = await w.fake.deliver(w.webhookUrl, created);
    for (let i = 0; i < 5 && redelivered.status === 503; i++) redelivered = await w.fake.deliver(w.webhookUrl, created);
    const body = await redelivered.json();
    expect(redelivered.status).toBe(200);
    expect({ outcome: body.data.outcome, duplicateAtStripe: w.fake.subscriptions.get(duplicate)!.status }).toEqual({
      outcome: expect.not.stringMatching(/^duplicate$/),
      duplicateAtStripe: 'canceled',
    });
    expect([...w.fake.refunds.values()]).toHaveLength(1);
  });

  it('writes the paid purchase when the unpaid one it replaced was ended at Stripe, even if the database went away at the last write', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 2500 });
    const user = await signUp(w.t);
    const open = async () => (await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } })).body.data.sessionId as string;
    const [s1, s2] = [await open(), await open()];
    const unpaid = w.fake.completeCheckout(s1, { payment: 'pending' }).id as string;
    await deliver(w, w.fake.takeEvents());
    const paid = w.fake.completeCheckout(s2).id as string;
    const created = w.fake.takeEvents().find((e) => e.type === 'customer.subscription.created')!;

    // The unpaid one is ended at Stripe; the paid one is read again, and the database goes away while Stripe answers.
    const cancel = w.fake.hold(`DELETE /v1/subscriptions/${unpaid}`);
    const inFlight = w.fake.deliver(w.webhookUrl, created);
    await cancel.reached;
    const reread = w.fake.hold(`GET /v1/subscriptions/${paid}`);
    cancel.release();
    await reread.reached;
    proxy.down();
    reread.release();
    expect((await inFlight).status).toBe(503);
    await proxy.up();

    let redelivered = await w.fake.deliver(w.webhookUrl, created);
    for (let i = 0; i < 5 && redelivered.status === 503; i++) redelivered = await w.fake.deliver(w.webhookUrl, created);
    const body = await redelivered.json();
    expect(redelivered.status).toBe(200);
    expect(w.fake.subscriptions.get(unpaid)!.status).toBe('canceled');
    expect(w.fake.subscriptions.get(paid)!.status).toBe('active');
    const mine = await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie });
    expect({ outcome: body.data.outcome, status: mine.status }).toEqual({ outcome: expect.not.stringMatching(/^duplicate$/), status: 200 });
  });
});
