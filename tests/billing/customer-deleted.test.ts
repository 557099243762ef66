import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import { signIn, signUp } from '../support/users.ts';
import { activeAgent, buyPaidTier, completeAnonymous, deliver, deliverPending, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A Stripe customer deleted at Stripe (review 79). Stripe deletes a customer for good and cancels its subscriptions;
 * every later request naming it answers "No such customer". The service kept naming it, so its user's every paid
 * checkout and billing-portal session answered 422 "Stripe refused ...: No such customer", for good. Now the
 * `customer.deleted` event unlinks it: the portal has no billing account until the next paid checkout, which makes
 * the user a new customer (not Stripe's replay of the first create, whose idempotency key would hand the deleted one
 * back for 24 hours).
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

/** A user who paid once, whose Stripe customer was then deleted at Stripe (its events delivered). */
async function userWithDeletedCustomer(verified: boolean) {
  const user = await signUp(w.t, { verified });
  const bought = await buyPaidTier(w, user, (await paidTier(w, (await activeAgent(w)).id)).id);
  w.fake.deleteCustomer(w.fake.subscriptions.get(bought.stripeSubscriptionId)!.customer as string);
  await deliverPending(w);
  return user;
}

/** The user buys another agent signed out, typing their own address on Stripe's page (under a customer Checkout makes). */
async function signedOutPurchase(email: string) {
  const agent = await activeAgent(w);
  const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: (await paidTier(w, agent.id)).id } });
  const stripeSub = w.fake.completeCheckout(start.body.data.sessionId, { email });
  await deliverPending(w);
  return { agent, stripeSub, sessionId: start.body.data.sessionId as string };
}

/** The user's link to a Stripe customer. */
const linkOf = (userId: string) => first(w.t.db, sql`select stripe_customer_id, deleted_at from billing_customers where user_id = ${userId}`);

describe('a Stripe customer deleted at Stripe', () => {
  it('ends its subscriptions here, and its user buys again with a new customer; the portal waits for that checkout', async () => {
    const agent = await activeAgent(w);
    const user = await signUp(w.t);
    const tier = await paidTier(w, agent.id, { priceCents: 1500 });
    const bought = await buyPaidTier(w, user, tier.id);
    const deletedId = w.fake.subscriptions.get(bought.stripeSubscriptionId)!.customer as string;

    w.fake.deleteCustomer(deletedId);
    await deliverPending(w);
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).status).toBe(404);
    const portal = await w.t.http.post('/me/billing-portal', { cookie: user.cookie, json: { flow: 'overview' } });
    expect([portal.status, portal.body.error?.code, portal.body.error?.message]).toEqual([
      422,
      'INVALID_STATE',
      'There is no billing account yet: the portal opens after a first paid checkout',
    ]);

    const again = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
    expect(again.status, again.text).toBe(200);
    const session = w.fake.sessions.get(again.body.data.sessionId)!;
    expect(session.customer).not.toBe(deletedId);
    expect(w.fake.customers.has(session.customer)).toBe(true);
    const link = await first<{ stripe_customer_id: string; deleted_at: Date | null }>(
      w.t.db,
      sql`select stripe_customer_id, deleted_at from billing_customers where user_id = ${user.userId}`,
    );
    expect(link).toEqual({ stripe_customer_id: session.customer, deleted_at: null });
    // the same customer for the next checkout, and the portal opens on it
    const third = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: (await paidTier(w, (await activeAgent(w)).id)).id } });
    expect(w.fake.sessions.get(third.body.data.sessionId)!.customer).toBe(session.customer);
    expect((await w.t.http.post('/me/billing-portal', { cookie: user.cookie, json: { flow: 'overview' } })).status).toBe(200);
  });

  it("another user's customer deleted changes nothing of this one's; the event delivered twice is recorded once", async () => {
    const agent = await activeAgent(w);
    const [one, other] = [await signUp(w.t), await signUp(w.t)];
    const tier = await paidTier(w, agent.id);
    const mine = await buyPaidTier(w, one, tier.id);
    const theirs = await buyPaidTier(w, other, tier.id);
    const theirCustomer = w.fake.subscriptions.get(theirs.stripeSubscriptionId)!.customer as string;
    w.fake.deleteCustomer(theirCustomer);
    const events = await deliverPending(w);
    const deleted = events.find((e) => e.type === 'customer.deleted')!;
    expect((await w.fake.deliver(w.webhookUrl, deleted)).status).toBe(200);
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: one.cookie })).body.data.status).toBe('active');
    expect((await w.t.http.post('/me/billing-portal', { cookie: one.cookie, json: { flow: 'overview' } })).status).toBe(200);
    expect(w.fake.subscriptions.get(mine.stripeSubscriptionId)!.status).toBe('active');
    // a signed customer.deleted whose object has no id (a hand-made test event) is recorded, not a 500
    const bare = { ...deleted, id: `evt_bare_${Date.now()}`, data: { object: { object: 'customer' } } };
    expect((await w.fake.deliver(w.webhookUrl, bare as typeof deleted)).status).toBe(200);
    expect((await w.t.http.post('/me/billing-portal', { cookie: one.cookie, json: { flow: 'overview' } })).status).toBe(200);
  });

  it('before its customer.deleted event arrives: the portal answers as after it, and a paid checkout makes a new customer at once', async () => {
    const agent = await activeAgent(w);
    const user = await signUp(w.t);
    const tier = await paidTier(w, agent.id);
    const bought = await buyPaidTier(w, user, tier.id);
    const deletedId = w.fake.subscriptions.get(bought.stripeSubscriptionId)!.customer as string;
    w.fake.deleteCustomer(deletedId);
    const held = w.fake.takeEvents(); // Stripe's events are late (or lost): the service has not heard of the deletion

    const portal = await w.t.http.post('/me/billing-portal', { cookie: user.cookie, json: { flow: 'overview' } });
    expect([portal.status, portal.body.error?.message]).toEqual([422, 'There is no billing account yet: the portal opens after a first paid checkout']);
    const other = await paidTier(w, (await activeAgent(w)).id);
    const checkout = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: other.id } });
    expect(checkout.status, checkout.text).toBe(200);
    const customer = w.fake.sessions.get(checkout.body.data.sessionId)!.customer as string;
    expect(customer).not.toBe(deletedId);
    expect(w.fake.customers.has(customer)).toBe(true);

    // the late events change nothing of the new customer's link
    await deliver(w, held);
    const link = await first(w.t.db, sql`select stripe_customer_id, deleted_at from billing_customers where user_id = ${user.userId}`);
    expect(link).toEqual({ stripe_customer_id: customer, deleted_at: null });
  });

  it('a purchase made signed out by a user whose customer was deleted links its new customer: the portal opens on it', async () => {
    const user = await userWithDeletedCustomer(true);
    const { agent, stripeSub } = await signedOutPurchase(user.email);
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).status).toBe(200);
    expect(await linkOf(user.userId)).toEqual({ stripe_customer_id: stripeSub.customer, deleted_at: null });
    expect((await w.t.http.post('/me/billing-portal', { cookie: user.cookie, json: { flow: 'overview' } })).status).toBe(200);
  });

  it('a purchase claimed by a user whose customer was deleted links its customer, as the placement does (review 81)', async () => {
    const user = await userWithDeletedCustomer(false); // not verified: a signed-out purchase with this address waits for its claim link
    const { stripeSub, sessionId } = await signedOutPurchase(user.email);
    expect((await completeAnonymous(w, sessionId)).status).toBe(202);
    const mail = (await mailsTo(w.t, user.email)).find((m) => m.subject === 'Confirm your Agent Marketplace purchase')!;
    const claimed = await w.t.http.post('/checkout/anonymous/claim', { json: { token: linkIn(mail).searchParams.get('token')! } });
    expect(claimed.status, claimed.text).toBe(200);

    const reset = await w.t.http.post('/api/auth/reset-password', { json: { newPassword: 'claimant chose this', token: claimed.body.data.passwordResetToken } });
    expect(reset.status, reset.text).toBe(200);
    const me = await signIn(w.t, { email: user.email, password: 'claimant chose this' });
    expect((await w.t.http.post('/me/billing-portal', { cookie: me.cookie, json: { flow: 'overview' } })).status).toBe(200);
    expect(await linkOf(user.userId)).toEqual({ stripe_customer_id: stripeSub.customer, deleted_at: null });
  });

  it("the link moves to the customer of a purchase the user still pays for under another customer (review 81)", async () => {
    const user = await signUp(w.t, { verified: true });
    const bought = await buyPaidTier(w, user, (await paidTier(w, (await activeAgent(w)).id)).id);
    const { agent, stripeSub } = await signedOutPurchase(user.email);

    w.fake.deleteCustomer(w.fake.subscriptions.get(bought.stripeSubscriptionId)!.customer as string);
    await deliverPending(w);
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).body.data.status).toBe('active');
    const portal = await w.t.http.post('/me/billing-portal', { cookie: user.cookie, json: { flow: 'overview' } });
    expect([portal.status, portal.body.error?.message]).toEqual([200, undefined]);
    expect(await linkOf(user.userId)).toEqual({ stripe_customer_id: stripeSub.customer, deleted_at: null });
  });

  it('before its customer.deleted event arrives, the portal opens on the customer of a purchase the user still pays for', async () => {
    const user = await signUp(w.t, { verified: true });
    const bought = await buyPaidTier(w, user, (await paidTier(w, (await activeAgent(w)).id)).id);
    const { stripeSub } = await signedOutPurchase(user.email);
    w.fake.deleteCustomer(w.fake.subscriptions.get(bought.stripeSubscriptionId)!.customer as string);
    w.fake.takeEvents(); // not heard of yet: the portal learns it from Stripe's "No such customer"

    const portal = await w.t.http.post('/me/billing-portal', { cookie: user.cookie, json: { flow: 'overview' } });
    expect([portal.status, portal.body.error?.message]).toEqual([200, undefined]);
    expect(await linkOf(user.userId)).toEqual({ stripe_customer_id: stripeSub.customer, deleted_at: null });
  });

  it('both of its customers deleted, their events late: a paid checkout goes on with a new customer, not 422 at every try (review 85)', async () => {
    const user = await signUp(w.t, { verified: true });
    const bought = await buyPaidTier(w, user, (await paidTier(w, (await activeAgent(w)).id)).id);
    const own = w.fake.subscriptions.get(bought.stripeSubscriptionId)!.customer as string;
    const other = (await signedOutPurchase(user.email)).stripeSub.customer as string;
    w.fake.deleteCustomer(own);
    w.fake.deleteCustomer(other);
    const held = w.fake.takeEvents();

    const tier = await paidTier(w, (await activeAgent(w)).id);
    const customers: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
      expect(res.status, res.text).toBe(200);
      customers.push(w.fake.sessions.get(res.body.data.sessionId)!.customer as string);
    }
    // one new customer, the same for every checkout, and neither deleted one linked again when the events arrive
    expect(new Set(customers).size).toBe(1);
    expect([own, other]).not.toContain(customers[0]);
    await deliver(w, held);
    expect(await linkOf(user.userId)).toEqual({ stripe_customer_id: customers[0], deleted_at: null });
  });

  it('the portal cancel flow for a subscription whose customer was deleted, its events late: 404, the link marked (review 85)', async () => {
    const agent = await activeAgent(w);
    const user = await signUp(w.t, { verified: true });
    const bought = await buyPaidTier(w, user, (await paidTier(w, agent.id)).id);
    w.fake.deleteCustomer(w.fake.subscriptions.get(bought.stripeSubscriptionId)!.customer as string);
    const held = w.fake.takeEvents();

    const res = await w.t.http.post('/me/billing-portal', { cookie: user.cookie, json: { flow: 'cancel', agentId: agent.id } });
    expect([res.status, res.body.error?.code]).toEqual([404, 'NOT_FOUND']);
    expect((await linkOf(user.userId)) as { deleted_at: Date | null }).toMatchObject({ deleted_at: expect.any(Date) });
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).status).toBe(404); // read back: canceled
    await deliver(w, held);
  });
});
