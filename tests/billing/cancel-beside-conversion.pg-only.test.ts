import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { eventually, statementsWaitingForLock } from '../support/databases.ts';
import type { CallResult } from '../support/http.ts';
import { insertTier } from '../support/fixtures.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, deliverPending, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A free subscription's row changed (canceled by the user, moved to another free tier by an admin) while the webhook
 * of the paid checkout the user just completed converts that same row to the paid subscription.
 *
 * A user cancels their free subscription while the webhook of the paid checkout they just completed converts that
 * same row to the paid subscription (billing_apply_stripe_subscription updates the live free row in place). The
 * cancel read the row as free and ended it by id, so it ended the row the webhook had just made paid: canceled
 * here, active and charging at Stripe, for good (found by a billing review).
 *
 * The interleaving is made exact: a transaction holds the free row as the webhook's conversion does; the cancel is
 * sent and its write waits for the row; the transaction converts the row and commits. Two connections at once, so
 * PostgreSQL only.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

describe('a free cancel beside the conversion of the same row to paid', () => {
  it('cancels what the row is by then: the paid subscription, at Stripe, at the end of its period', async () => {
    const agent = await activeAgent(w);
    const free = await insertTier(w.t.db, agent.id, { priceCents: 0 });
    const paid = await paidTier(w, agent.id);
    const user = await signUp(w.t);
    const started = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: free.id } });
    expect(started.status).toBe(201);
    const rowId = started.body.data.subscription.id as string;
    const checkout = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: paid.id } });
    const stripeSub = w.fake.completeCheckout(checkout.body.data.sessionId); // paid; its events not delivered yet

    let canceled: Promise<CallResult> | undefined;
    await w.t.db.transaction().execute(async (trx) => {
      await sql`select 1 from subscriptions where id = ${rowId} for update`.execute(trx);
      canceled = w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: user.cookie });
      await eventually('the cancel waits for the row', async () => (await statementsWaitingForLock(w.t.db, '%update public.subscriptions%')) > 0);
      // the conversion, as billing_apply_stripe_subscription writes it for a live free row
      await sql`update subscriptions set tier_id = ${paid.id}, status = 'active', stripe_subscription_id = ${stripeSub.id},
                       stripe_customer_id = ${stripeSub.customer}, updated_at = now()
                 where id = ${rowId}`.execute(trx);
    });
    const res = await canceled!;
    expect(res.status, res.text).toBe(200);
    expect(res.body.data).toMatchObject({ id: rowId, tierId: paid.id, status: 'active', cancelAtPeriodEnd: true });
    // Stripe stops charging after this period; before, it went on while the row here was canceled
    expect(w.fake.subscriptions.get(stripeSub.id)).toMatchObject({ status: 'active', cancel_at_period_end: true });
    await deliverPending(w);
    const row = await first<{ status: string; cancel: boolean }>(
      w.t.db,
      sql`select status, cancel_at_period_end as cancel from subscriptions where id = ${rowId}`,
    );
    expect(row).toEqual({ status: 'active', cancel: true });
  });
});

describe("an admin's free-to-free tier change beside the conversion of the same row to paid", () => {
  it('attack: never writes a free tier onto the row the paid checkout converted; the change is judged as what the row became (422)', async () => {
    // The change read the row as free and wrote tier_id by id alone: a free tier on a subscription Stripe charges the
    // paid price for, metered on the free tier's quota until a later Stripe event (found by a review).
    const agent = await activeAgent(w);
    const free = await insertTier(w.t.db, agent.id, { priceCents: 0 });
    const otherFree = await insertTier(w.t.db, agent.id, { priceCents: 0 });
    const paid = await paidTier(w, agent.id);
    const user = await signUp(w.t);
    const started = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: free.id } });
    expect(started.status).toBe(201);
    const rowId = started.body.data.subscription.id as string;
    const checkout = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: paid.id } });
    const stripeSub = w.fake.completeCheckout(checkout.body.data.sessionId);

    let changed: Promise<CallResult> | undefined;
    await w.t.db.transaction().execute(async (trx) => {
      await sql`select 1 from subscriptions where id = ${rowId} for update`.execute(trx);
      changed = w.t.http.post(`/admin/subscriptions/${rowId}/change-tier`, { cookie: w.admin.cookie, json: { tierId: otherFree.id } });
      await eventually('the change waits for the row', async () => (await statementsWaitingForLock(w.t.db, '%update public.subscriptions%')) > 0);
      // the conversion, as billing_apply_stripe_subscription writes it for a live free row
      await sql`update subscriptions set tier_id = ${paid.id}, status = 'active', stripe_subscription_id = ${stripeSub.id},
                       stripe_customer_id = ${stripeSub.customer}, updated_at = now()
                 where id = ${rowId}`.execute(trx);
    });
    const res = await changed!;
    expect([res.status, res.body.error?.code], res.text).toEqual([422, 'INVALID_STATE']);
    expect(res.body.error.message).toMatch(/cannot move to a free tier/);
    await deliverPending(w);
    const row = await first<{ tierId: string; stripe: string | null }>(
      w.t.db,
      sql`select tier_id as "tierId", stripe_subscription_id as stripe from subscriptions where id = ${rowId}`,
    );
    expect(row).toEqual({ tierId: paid.id, stripe: stripeSub.id });
  });
});
