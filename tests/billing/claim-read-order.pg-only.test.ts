import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { eventually, holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import type { CallResult } from '../support/http.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import { signIn, signUp } from '../support/users.ts';
import { activeAgent, deliver, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * The claim of an anonymous purchase reads the subscription from Stripe
 * first (readToApply, read number n) and writes that read after billing_claim_purchase (claim-purchase.ts). While
 * the claim is still pending, a webhook event about the purchase finds no subscriber (placeAnonymousPurchase:
 * `claim`) and records the event with no row, so its newer read (number > n) leaves no trace for the read-order rule
 * of migration 20261126000100 to compare against. A change at Stripe that lands between the claim's read and its
 * write (here: the subscription canceled at Stripe, e.g. by an operator at the buyer's request) is then overwritten
 * by the claim's older read: the row says `active`, Stripe says `canceled`, and Stripe sends nothing more about a
 * canceled subscription, so the account keeps paid access with nothing charged, for good.
 *
 * The interleaving is forced as in tests/billing/unclaimed-purchase-race.pg-only.test.ts: the test holds the claiming
 * account's credential row, so the claim waits inside billing_claim_purchase, after its Stripe read.
 */
let w: BillingWorld;
let locker: postgres.Sql;
beforeAll(async () => {
  w = await startBillingWorld();
  locker = postgres(w.t.databaseUrl!, { max: 1, onnotice: () => {} });
});
afterAll(async () => {
  await locker?.end({ timeout: 1 });
  await w?.close();
});

describe('a claim beside a change at Stripe', () => {
  it('attack on read order: a subscription canceled at Stripe while its claim is under way is not written back as active', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 3300 });
    const email = `claim-order-${Date.now()}@example.test`;
    const holder = await signUp(w.t, { email, name: 'Holder' }); // unverified: the purchase waits for its claim link
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    w.fake.takeEvents();
    const stripeSub = w.fake.completeCheckout(start.body.data.sessionId, { email, name: 'Ann Buyer' });
    expect((await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId: start.body.data.sessionId } })).status).toBe(202);
    await deliver(w, w.fake.takeEvents());
    const mail = (await mailsTo(w.t, email)).find((m) => m.subject === 'Confirm your Agent Marketplace purchase')!;
    const token = linkIn(mail).searchParams.get('token')!;

    const stripe = w.fake.client();
    const held = await holdOpen(locker, (tx) => tx`select 1 from account where "userId" = ${holder.userId} and "providerId" = 'credential' for update`);
    let claimed: Promise<CallResult> | undefined;
    try {
      // The claim has read Stripe (active) and waits inside billing_claim_purchase.
      claimed = w.t.http.post('/checkout/anonymous/claim', { json: { token } });
      await eventually('the claim waits', async () => (await statementsWaitingForLock(w.t.db, '%billing_claim_purchase%')) > 0);
      // Meanwhile the subscription is canceled at Stripe and its event processed (the claim is still pending then).
      await stripe.subscriptions.cancel(stripeSub.id);
      const deleted = w.fake.takeEvents().filter((e) => e.type === 'customer.subscription.deleted');
      expect(deleted).toHaveLength(1);
      await deliver(w, deleted);
    } finally {
      await held.release();
    }
    const res = await claimed!;
    expect(res.status, res.text).toBe(200);

    expect(w.fake.subscriptions.get(stripeSub.id)!.status).toBe('canceled');
    const row = await first<{ status: string }>(w.t.db, sql`select status from subscriptions where stripe_subscription_id = ${stripeSub.id}`);
    expect(row).toEqual({ status: 'canceled' });
    // What the claimant sees once signed in: no paid access to a subscription Stripe has ended.
    const reset = await w.t.http.post('/api/auth/reset-password', {
      json: { token: res.body.data.passwordResetToken, newPassword: 'the claimant chose this' },
    });
    expect(reset.status, reset.text).toBe(200);
    const claimant = await signIn(w.t, { email, password: 'the claimant chose this' });
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: claimant.cookie })).status).toBe(404);
  });
});
