import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { insertTier } from '../support/fixtures.ts';
import { mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';
import { accountsWith, activeAgent, completeAnonymous, deliver, paidTier, removeUser, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * An anonymous checkout whose first payment is not made (Stripe:
 * `incomplete`; a bank debit still under way, 3-D Secure left unanswered, a debit from a made-up IBAN that will fail)
 * costs the attacker nothing. The success page refuses such a session (422 "not complete yet"), but the webhook
 * places it all the same (subscriberOf: only an *ended* purchase is placed with nobody), with whatever address was
 * typed on Stripe's page:
 *   - a verified stranger gets an `incomplete` row, which blocks every purchase of that agent by them (checkout 422,
 *     free start 409) and which they cannot cancel (404), until Stripe expires the unpaid subscription;
 *   - an address without an account gets an account made for it and a set-password mail;
 *   - an unverified account's address gets a claim mail, one per unpaid purchase.
 * Nothing of it should happen before the purchase is paid: once it is, Stripe's next event places it as usual.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

/** The attacker checks out anonymously, types `email`, and never pays: only the webhook's events follow. */
async function unpaidAnonymousPurchase(email: string, tierId: string) {
  const start = await w.t.http.post('/checkout/anonymous', { json: { tierId } });
  expect(start.status).toBe(200);
  w.fake.takeEvents();
  const stripeSub = w.fake.completeCheckout(start.body.data.sessionId, { email, name: 'Not The Owner', payment: 'pending' });
  expect(stripeSub.status).toBe('incomplete');
  await deliver(w, w.fake.takeEvents());
  return { sessionId: start.body.data.sessionId as string, stripeSubscriptionId: stripeSub.id as string };
}

describe('an anonymous purchase nobody paid for', () => {
  it('attack: typed with a verified stranger\'s address, it does not lock the stranger out of buying the agent', async () => {
    const agent = await activeAgent(w);
    const pro = await paidTier(w, agent.id, { name: 'Pro', priceCents: 4000 });
    const free = await insertTier(w.t.db, agent.id, { name: 'Free' });
    const victim = await signUp(w.t, { verified: true });

    const { sessionId, stripeSubscriptionId } = await unpaidAnonymousPurchase(victim.email, pro.id);
    // the success page itself refuses it: nothing is paid
    expect((await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId } })).status).toBe(422);

    // The stranger, who bought nothing, can still buy the agent: its paid tier, or its free one.
    const checkout = await w.t.http.post('/me/checkout', { cookie: victim.cookie, json: { tierId: pro.id } });
    expect(checkout.status, checkout.text).toBe(200);
    const freeStart = await w.t.http.post('/me/checkout', { cookie: victim.cookie, json: { tierId: free.id } });
    expect(freeStart.status, freeStart.text).toBe(201);
    // and nothing the stranger never bought sits on their account
    const theirs = await first<{ n: number }>(
      w.t.db,
      sql`select count(*)::int as n from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`,
    );
    expect(theirs!.n).toBe(0);
  });

  it('attack: typed with an address that has no account, it makes no account and mails nobody', async () => {
    const agent = await activeAgent(w);
    const pro = await paidTier(w, agent.id, { priceCents: 4000 });
    const email = `nobody-${Date.now()}@example.test`;
    await unpaidAnonymousPurchase(email, pro.id);
    expect(await rows(w.t.db, sql`select id from "user" where lower(email) = ${email}`)).toEqual([]);
    expect(await mailsTo(w.t, email)).toEqual([]);
  });

  it('attack: typed again and again with an unverified account\'s address, it mails no claim link', async () => {
    const agent = await activeAgent(w);
    const pro = await paidTier(w, agent.id, { priceCents: 4000 });
    const holder = await signUp(w.t); // unverified: its owner never confirmed the address
    for (let i = 0; i < 3; i++) await unpaidAnonymousPurchase(holder.email, pro.id);
    const claimMails = (await mailsTo(w.t, holder.email)).filter((m) => m.subject === 'Confirm your Agent Marketplace purchase');
    expect(claimMails).toHaveLength(0);
  });

  it('once paid, it is placed as any anonymous purchase (the new account made then)', async () => {
    const agent = await activeAgent(w);
    const pro = await paidTier(w, agent.id, { priceCents: 4000 });
    const email = `pays-later-${Date.now()}@example.test`;
    const { stripeSubscriptionId } = await unpaidAnonymousPurchase(email, pro.id);
    w.fake.payInvoice(w.fake.subscriptions.get(stripeSubscriptionId)!.latest_invoice);
    await deliver(w, w.fake.takeEvents());
    const row = await first<{ email: string; status: string }>(
      w.t.db,
      sql`select u.email, s.status from subscriptions s join "user" u on u.id = s.user_id where s.stripe_subscription_id = ${stripeSubscriptionId}`,
    );
    expect(row).toEqual({ email, status: 'active' });
  });
});

describe('the success page of an anonymous purchase that nobody may hold', () => {
  // Review 65: the success page placed the purchase from the address typed at checkout before it asked what the webhook
  // asks (subscriberOf): whether the buyer's account was removed, and whether Stripe has ended the purchase. Anyone
  // with the session id (the success page's URL, in a browser's history) made a removed person a new account and
  // had it mailed a set-password link.

  it("attack: posted again after the buyer's account was removed, it makes no account and mails nothing (422 ended)", async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 2900 });
    const email = `gone-${crypto.randomUUID().slice(0, 8)}@example.test`;
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    expect(start.status).toBe(200);
    const sessionId = start.body.data.sessionId as string;
    const stripeSub = w.fake.completeCheckout(sessionId, { email, name: 'Gone Buyer' });
    const placed = await completeAnonymous(w, sessionId);
    expect(placed.status, placed.text).toBe(200);
    expect(placed.body.data.created).toBe(true);
    await deliver(w, w.fake.takeEvents());
    const mailsBefore = (await mailsTo(w.t, email)).length;

    const removed = await removeUser(w, placed.body.data.user.id);
    expect(removed.status, removed.text).toBe(200);
    await deliver(w, w.fake.takeEvents());
    expect(w.fake.subscriptions.get(stripeSub.id)!.status).toBe('canceled');
    expect(await accountsWith(w, email)).toBe(0);

    const again = await completeAnonymous(w, sessionId);
    expect(again.status, again.text).toBe(422);
    expect(again.body.error).toMatchObject({ code: 'INVALID_STATE', details: { reason: 'ended' } });
    expect(await accountsWith(w, email)).toBe(0);
    expect((await mailsTo(w.t, email)).length).toBe(mailsBefore);
  });

  it('one Stripe ended before anyone placed it makes no account and mails nothing (422 ended)', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 2900 });
    const email = `ended-${crypto.randomUUID().slice(0, 8)}@example.test`;
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    const sessionId = start.body.data.sessionId as string;
    const stripeSub = w.fake.completeCheckout(sessionId, { email, name: 'Ended Buyer' });
    w.fake.takeEvents();
    await w.fake.client().subscriptions.cancel(stripeSub.id);
    w.fake.takeEvents();

    const res = await completeAnonymous(w, sessionId);
    expect(res.status, res.text).toBe(422);
    expect(res.body.error).toMatchObject({ code: 'INVALID_STATE', details: { reason: 'ended' } });
    expect(await accountsWith(w, email)).toBe(0);
    expect(await mailsTo(w.t, email)).toEqual([]);
  });
});

describe("the name of the account made for an anonymous buyer", () => {
  it("attack: a name typed on Stripe's page with a right-to-left override and a C1 control is put on one line, as a name typed here must be", async () => {
    // Review 66: sign-up refuses such a name, but the one typed on Stripe's page became the new account's name as it
    // was, shown in the admin's user list and the session (and 200 characters did not bound it).
    const forged = 'Victim CTO \u202e>elpmaxe.mitciv@otc<\u0085x';
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    expect(start.status).toBe(200);
    const email = `buyer-${crypto.randomUUID().slice(0, 8)}@example.test`;
    w.fake.completeCheckout(start.body.data.sessionId, { email, name: forged });
    const done = await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId: start.body.data.sessionId } });
    expect(done.status, done.text).toBe(200);

    const list = await w.t.http.get(`/api/auth/admin/list-users?searchField=email&searchValue=${encodeURIComponent(email)}`, {
      cookie: w.admin.cookie,
    });
    expect(list.status, list.text).toBe(200);
    expect(list.body.users.map((u: { email: string; name: string }) => [u.email, u.name])).toEqual([[email, 'Victim CTO >elpmaxe.mitciv@otc< x']]);
  });
});
