import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, deliver, deliverPending, openPaidCheckout, paidTier, DRAIN_TOKEN, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A checkout opened while the agent was live and paid after an admin deleted the agent (Stripe keeps the hosted page
 * payable for a day): nothing of the agent can be used any more (its client is disabled), yet the purchase was
 * written live and the buyer charged a whole period, with no refund; the deletion's round only stopped the renewal
 * (review 30). Rule 18: "A user is never charged for a subscription the marketplace does not serve". Now it is
 * refunded in full and canceled before anything is written (functions/billing/subscription-state.ts,
 * undoPurchaseOfDeletedAgent); an anonymous one makes no account.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld({ env: { DRAIN_TOKEN } });
});
afterAll(() => w.close());

describe('a checkout paid after its agent was deleted', () => {
  it('is refunded and canceled, never served for a period nobody can use', async () => {
    const { agent, sessionId } = await openPaidCheckout(w, { priceCents: 4900 });

    // the admin deletes the agent while the buyer's Stripe page is open
    expect((await w.t.http.delete(`/agents/${agent.id}`, { cookie: w.admin.cookie })).status).toBe(200);

    // the buyer pays on the page still open; Stripe's events arrive; the background round runs
    const sub = w.fake.completeCheckout(sessionId);
    await deliverPending(w);
    const drained = await w.t.http.post('/internal/drain', { bearer: DRAIN_TOKEN });
    expect(drained.status, drained.text).toBe(200);
    await deliverPending(w);

    const refunds = [...w.fake.refunds.values()].filter((r) => r.metadata.stripeSubscriptionId === sub.id);
    const stripeSub = w.fake.subscriptions.get(sub.id)!;
    const row = await first<{ status: string; cancelAtPeriodEnd: boolean }>(
      w.t.db,
      sql`select status, cancel_at_period_end as "cancelAtPeriodEnd" from subscriptions where stripe_subscription_id = ${sub.id}`,
    );
    expect({ stripeStatus: stripeSub.status, refunded: refunds.reduce((n, r) => n + r.amount, 0), row: row?.status }).toEqual({
      stripeStatus: 'canceled',
      refunded: 4900,
      row: 'canceled',
    });
  });

  it('an anonymous checkout paid after the deletion: refunded and canceled too', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 2900 });
    const checkout = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    expect(checkout.status).toBe(200);
    expect((await w.t.http.delete(`/agents/${agent.id}`, { cookie: w.admin.cookie })).status).toBe(200);

    const email = `buyer-${Date.now()}@example.com`;
    const sub = w.fake.completeCheckout(checkout.body.data.sessionId, { email });
    await deliverPending(w);
    const drained = await w.t.http.post('/internal/drain', { bearer: DRAIN_TOKEN });
    expect(drained.status, drained.text).toBe(200);
    await deliverPending(w);

    const refunds = [...w.fake.refunds.values()].filter((r) => r.metadata.stripeSubscriptionId === sub.id);
    expect({ stripeStatus: w.fake.subscriptions.get(sub.id)!.status, refunded: refunds.reduce((n, r) => n + r.amount, 0) }).toEqual({
      stripeStatus: 'canceled',
      refunded: 2900,
    });
    // no account was made for a purchase that is refunded
    expect(await first(w.t.db, sql`select id from "user" where email = ${email}`)).toBeUndefined();
  });

  it("the buyer back on the success page first: 422 agent_deleted, refunded and canceled, no account made; the webhook after it changes nothing", async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 1900 });
    const checkout = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    expect(checkout.status).toBe(200);
    expect((await w.t.http.delete(`/agents/${agent.id}`, { cookie: w.admin.cookie })).status).toBe(200);

    const email = `early-${Date.now()}@example.com`;
    const sub = w.fake.completeCheckout(checkout.body.data.sessionId, { email });
    const completed = await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId: checkout.body.data.sessionId } });
    expect([completed.status, completed.body.error?.code, completed.body.error?.details?.reason]).toEqual([422, 'INVALID_STATE', 'agent_deleted']);
    const refunded = () =>
      [...w.fake.refunds.values()].filter((r) => r.metadata.stripeSubscriptionId === sub.id).reduce((n, r) => n + r.amount, 0);
    expect({ stripeStatus: w.fake.subscriptions.get(sub.id)!.status, refunded: refunded() }).toEqual({ stripeStatus: 'canceled', refunded: 1900 });

    await deliverPending(w);
    expect(refunded()).toBe(1900);
    expect(await first(w.t.db, sql`select id from "user" where email = ${email}`)).toBeUndefined();
    expect(await first(w.t.db, sql`select id from subscriptions where stripe_subscription_id = ${sub.id}`)).toBeUndefined();
  });
  it('attack: a purchase waiting for its claim link while the agent is deleted: the claim refunds and cancels it, never writes it live (review 53)', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 3900 });
    // An unverified account holds the address the buyer types: the purchase waits for the mailed claim link, no row.
    const email = `claimant-${crypto.randomUUID()}@example.test`;
    await signUp(w.t, { email });
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    expect(start.status).toBe(200);
    w.fake.takeEvents();
    const sub = w.fake.completeCheckout(start.body.data.sessionId, { email, name: 'Buyer' });
    await deliver(w, w.fake.takeEvents());
    expect(await first(w.t.db, sql`select id from subscriptions where stripe_subscription_id = ${sub.id}`)).toBeUndefined();
    const token = linkIn((await mailsTo(w.t, email)).find((m) => m.subject === 'Confirm your Agent Marketplace purchase')!).searchParams.get('token')!;

    // The admin deletes the agent (its round ends rows; this purchase has none yet), then the buyer follows the link.
    expect((await w.t.http.delete(`/agents/${agent.id}`, { cookie: w.admin.cookie })).status).toBe(200);
    expect((await w.t.http.post('/internal/drain', { bearer: DRAIN_TOKEN })).status).toBe(200);
    await deliverPending(w);
    const claimed = await w.t.http.post('/checkout/anonymous/claim', { json: { token } });
    expect((await w.t.http.post('/internal/drain', { bearer: DRAIN_TOKEN })).status).toBe(200);
    await deliverPending(w);

    expect(claimed.status, claimed.text).toBe(200);
    expect(claimed.body.data.subscription).toMatchObject({ status: 'canceled', agentId: agent.id });
    const refunded = [...w.fake.refunds.values()].filter((r) => r.metadata.stripeSubscriptionId === sub.id).reduce((n, r) => n + r.amount, 0);
    expect({ stripe: w.fake.subscriptions.get(sub.id)!.status, refunded }).toEqual({ stripe: 'canceled', refunded: 3900 });
    const live = await first(w.t.db, sql`select id from subscriptions where stripe_subscription_id = ${sub.id} and status <> 'canceled'`);
    expect(live).toBeUndefined();
  });

  it('the success page reloaded after the agent was deleted, for a purchase that served: shown as before, no word of a refund that did not happen (review 53)', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 1900 });
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    const email = `served-${crypto.randomUUID()}@example.test`;
    const sub = w.fake.completeCheckout(start.body.data.sessionId, { email });
    const complete = () => w.t.http.post('/checkout/anonymous/complete', { json: { sessionId: start.body.data.sessionId } });
    const placed = await complete();
    expect(placed.status, placed.text).toBe(200);
    await deliverPending(w);

    // Deleted after it served: the round stops its renewal, nothing refunded (rule 18).
    expect((await w.t.http.delete(`/agents/${agent.id}`, { cookie: w.admin.cookie })).status).toBe(200);
    expect((await w.t.http.post('/internal/drain', { bearer: DRAIN_TOKEN })).status).toBe(200);
    await deliverPending(w);

    const again = await complete();
    expect(again.status, again.text).toBe(200);
    expect(again.body.data.subscription).toMatchObject({ id: placed.body.data.subscription.id, status: 'active', cancelAtPeriodEnd: true });
    expect([...w.fake.refunds.values()].filter((r) => r.metadata.stripeSubscriptionId === sub.id)).toEqual([]);
  });
});
