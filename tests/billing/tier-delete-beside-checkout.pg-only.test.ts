import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { eventually, statementsWaitingForLock } from '../support/databases.ts';
import type { CallResult } from '../support/http.ts';
import { insertTier } from '../support/fixtures.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A free checkout (POST /me/checkout) beside an admin's deletion of its tier (DELETE /agents/{agentId}/pricing/{tierId}).
 * deleteTier deletes an unused free tier, and archives it instead when its delete meets a subscription (23503). The
 * other order was not handled: startFreeSubscription read the tier, the deletion committed, and the insert's foreign
 * key refused the subscription: 500 for the buyer (review 19). The insert now takes the tier `for key share`, still
 * open, in its own statement: a deletion that committed first leaves it nothing (404, as for any tier not offered), a
 * deletion that comes second waits for it and archives the tier.
 *
 * The interleaving is made exact by holding the tier row: whichever is sent first waits for it first. Two connections
 * at once, so PostgreSQL only.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

const subscribing = '%insert into public.subscriptions%';

describe('a free checkout while its tier is deleted', () => {
  async function race(first: 'deletion' | 'checkout') {
    const agent = await activeAgent(w);
    const tier = await insertTier(w.t.db, agent.id, { priceCents: 0 });
    const buyer = await signUp(w.t, { verified: true });
    const send = {
      deletion: () => w.t.http.delete(`/agents/${agent.id}/pricing/${tier.id}`, { cookie: w.admin.cookie }),
      checkout: () => w.t.http.post('/me/checkout', { cookie: buyer.cookie, json: { tierId: tier.id } }),
    };
    const waiting = { deletion: '%delete from public.tiers%', checkout: subscribing };
    const order: Array<'deletion' | 'checkout'> = first === 'deletion' ? ['deletion', 'checkout'] : ['checkout', 'deletion'];
    const sent: Partial<Record<'deletion' | 'checkout', Promise<CallResult>>> = {};
    await w.t.db.transaction().execute(async (trx) => {
      await sql`select 1 from tiers where id = ${tier.id} for update`.execute(trx);
      for (const which of order) {
        sent[which] = send[which]();
        await eventually(`the ${which} waits for the tier row`, async () => (await statementsWaitingForLock(w.t.db, waiting[which])) > 0);
      }
    });
    const [deleted, bought] = [await sent.deletion!, await sent.checkout!];
    const subscriptions = await rows(w.t.db, sql`select 1 from subscriptions where user_id = ${buyer.userId}`);
    const tierLeft = await rows<{ archived: boolean; isPublic: boolean }>(
      w.t.db,
      sql`select archived_at is not null as archived, is_public as "isPublic" from tiers where id = ${tier.id}`,
    );
    return { deleted, bought, subscriptions, tierLeft };
  }

  it('attack: the deletion first: the buyer gets 404, not 500, and no subscription; the tier is gone', async () => {
    const { deleted, bought, subscriptions, tierLeft } = await race('deletion');
    expect(deleted.status, deleted.text).toBe(200);
    expect([bought.status, bought.body.error?.code], bought.text).toEqual([404, 'NOT_FOUND']);
    expect(subscriptions).toEqual([]);
    expect(tierLeft).toEqual([]);
  });

  it('the checkout first: the subscription stands and the deletion archives the tier', async () => {
    const { deleted, bought, subscriptions, tierLeft } = await race('checkout');
    expect(bought.status, bought.text).toBe(201);
    expect(subscriptions).toHaveLength(1);
    expect(deleted.status, deleted.text).toBe(200);
    expect(tierLeft).toEqual([{ archived: true, isPublic: false }]);
  });

  it('attack: a tier archived after the checkout read it open: 404, and no subscription on a tier closed to new buyers', async () => {
    // The tier has a subscriber, so its deletion archives it. The checkout is held after its read of the tier (at its
    // daily allowance, whose row a transaction holds) while the archiving commits; it then wrote the subscription.
    const agent = await activeAgent(w);
    const tier = await insertTier(w.t.db, agent.id, { priceCents: 0 });
    const earlier = await signUp(w.t);
    expect((await w.t.http.post('/me/checkout', { cookie: earlier.cookie, json: { tierId: tier.id } })).status).toBe(201);
    const buyer = await signUp(w.t, { verified: true });
    let checkout: Promise<CallResult> | undefined;
    await w.t.db.transaction().execute(async (trx) => {
      await sql`select public.rate_limit_hit(${`billing-checkout|${buyer.userId}|own`}, 1000, 86400000, now())`.execute(trx);
      checkout = w.t.http.post('/me/checkout', { cookie: buyer.cookie, json: { tierId: tier.id } });
      await eventually('the checkout waits at its allowance', async () => (await statementsWaitingForLock(w.t.db, '%rate_limit_hit%')) > 0);
      const deleted = await w.t.http.delete(`/agents/${agent.id}/pricing/${tier.id}`, { cookie: w.admin.cookie });
      expect(deleted.status, deleted.text).toBe(200);
    });
    const bought = await checkout!;
    expect([bought.status, bought.body.error?.code], bought.text).toEqual([404, 'NOT_FOUND']);
    expect(await rows(w.t.db, sql`select 1 from subscriptions where user_id = ${buyer.userId}`)).toEqual([]);
    expect(await rows(w.t.db, sql`select archived_at is not null as archived from tiers where id = ${tier.id}`)).toEqual([{ archived: true }]);
  });
});
