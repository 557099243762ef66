import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, openPostgres, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { anotherInstance, eventually, statementsWaitingForLock, type TestDatabase } from '../support/databases.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, buyPaidTier, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * Two writers of one paid subscription whose reads of Stripe and writes cross (migration
 * 20261126000100_stripe_read_order.sql): instance A reads the subscription (active), it is then canceled at Stripe,
 * instance B reads "canceled" and applies it, and only then does A apply its older read. A must not bring the
 * canceled subscription back: Stripe sends nothing more about it, so the user would keep paid access for good.
 *
 * The interleaving is forced, not hoped for: an uncommitted stripe_events row with the id of A's event holds A inside
 * the writer, after its Stripe read and before its write, until the test lets go. (PostgreSQL only: the hold needs a
 * second connection.)
 */
let w: BillingWorld;
let instanceB: TestDatabase;
let b: TestApp;
beforeAll(async () => {
  w = await startBillingWorld();
  instanceB = anotherInstance({ database: w.t.database, url: w.t.databaseUrl, drop: async () => {} });
  b = await startTestApp({ testDatabase: instanceB, env: w.fake.env() });
});
afterAll(async () => {
  await b.close();
  await instanceB.drop();
  await w.close();
});

const statusOf = async (subscriptionId: string) =>
  (await first<{ status: string }>(w.t.db, sql`select status from subscriptions where id = ${subscriptionId}`))!.status;

describe('an older Stripe read applied after a newer one', () => {
  it('is superseded: the canceled subscription stays canceled, and the event is recorded', async () => {
    const user = await signUp(w.t);
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { name: 'Pro', priceCents: 3000 });
    const bought = await buyPaidTier(w, user, tier.id);
    const stripe = w.fake.client();

    await stripe.subscriptions.update(bought.stripeSubscriptionId, { cancel_at_period_end: true });
    const [updated] = w.fake.takeEvents().filter((e) => e.type === 'customer.subscription.updated');

    const holder = openPostgres(w.t.databaseUrl!, { max: 1 });
    let letGo!: () => void;
    const released = new Promise<void>((resolve) => (letGo = resolve));
    let holding!: () => void;
    const held = new Promise<void>((resolve) => (holding = resolve));
    const hold = holder.db
      .transaction()
      .execute(async (trx) => {
        await sql`insert into public.stripe_events (id, type, received_at) values (${updated!.id}, 'hold', now())`.execute(trx);
        holding();
        await released;
        throw new Error('roll back the hold');
      })
      .catch(() => {});
    try {
      await held;
      // A reads Stripe (active, cancel at period end) and waits in the writer.
      const atA = w.fake.deliver(`${w.t.baseUrl}/webhooks/stripe`, updated!);
      await eventually('the first writer waits in the writer', async () =>
        (await statementsWaitingForLock(w.t.db, '%billing_apply_stripe_subscription%')) > 0);
      // Canceled at Stripe; B reads and applies that.
      await stripe.subscriptions.cancel(bought.stripeSubscriptionId);
      const [deleted] = w.fake.takeEvents().filter((e) => e.type === 'customer.subscription.deleted');
      const atB = await w.fake.deliver(`${b.baseUrl}/webhooks/stripe`, deleted!);
      expect(atB.status).toBe(200);
      expect(await statusOf(bought.subscriptionId)).toBe('canceled');

      letGo();
      await hold;
      const answerA = await atA;
      expect(answerA.status).toBe(200);
      expect((await answerA.json()).data.outcome).toBe('superseded');
      expect(await statusOf(bought.subscriptionId)).toBe('canceled');
      expect(w.fake.subscriptions.get(bought.stripeSubscriptionId)!.status).toBe('canceled');
      // A's event counts as handled: Stripe's redelivery of it changes nothing.
      const again = await w.fake.deliver(`${b.baseUrl}/webhooks/stripe`, updated!);
      expect((await again.json()).data.outcome).toBe('duplicate');
      expect(await statusOf(bought.subscriptionId)).toBe('canceled');
    } finally {
      letGo();
      await hold;
      await holder.close();
    }
  }, 60_000);
});

