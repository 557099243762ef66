import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { signUp } from '../support/users.ts';
import { CONTRACT_STRIPE_EVENTS } from '../support/contract.ts';
import { activeAgent, buyPaidTier, countRows, deliver, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/** POST /webhooks/stripe: signatures, once-only processing, notifications re-read from Stripe, failures retried. */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

async function checkoutEvents(w: BillingWorld) {
  const agent = await activeAgent(w);
  const tier = await paidTier(w, agent.id);
  const user = await signUp(w.t);
  const checkout = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
  w.fake.takeEvents();
  const stripeSub = w.fake.completeCheckout(checkout.body.data.sessionId);
  return { agent, tier, user, stripeSub, events: w.fake.takeEvents() };
}

const post = (body: string, signature?: string) =>
  w.t.http.post('/webhooks/stripe', {
    body,
    headers: { 'content-type': 'application/json', ...(signature ? { 'stripe-signature': signature } : {}) },
  });

describe('signature', () => {
  it('answers 400 and stores nothing for a missing, forged, tampered or foreign-secret signature', async () => {
    const { events, stripeSub } = await checkoutEvents(w);
    const completed = events.find((e) => e.type === 'checkout.session.completed')!;
    const { payload, header } = await w.fake.sign(completed);
    const foreign = await w.fake.sign(completed, 'whsec_someone_else');
    const subsBefore = await countRows(w.t, 'subscriptions');
    const eventsBefore = await countRows(w.t, 'stripe_events');

    const attempts = [
      await post(payload),
      await post(payload, 't=1700000000,v1=deadbeef'),
      await post(payload.replace(completed.id, 'evt_forged'), header),
      await post(payload, foreign.header),
      await post('not json', header),
    ];
    for (const res of attempts) {
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('VALIDATION_ERROR');
    }
    expect(await countRows(w.t, 'subscriptions')).toBe(subsBefore);
    expect(await countRows(w.t, 'stripe_events')).toBe(eventsBefore);
    const placed = await first(w.t.db, sql`select 1 as x from subscriptions where stripe_subscription_id = ${stripeSub.id}`);
    expect(placed).toBeUndefined();

    // The genuine delivery still works afterwards.
    expect((await post(payload, header)).status).toBe(200);
  });

  it('answers 400 and stores nothing for a signed event without an id, a type or a data.object (was a 500)', async () => {
    const base = { object: 'event', created: 1, api_version: '2026-10-28.endive', livemode: false };
    const eventsBefore = await countRows(w.t, 'stripe_events');
    for (const event of [
      { ...base, id: 'evt_null_object', type: 'invoice.paid', data: { object: null } },
      { ...base, id: 'evt_no_data', type: 'customer.subscription.updated' },
      { ...base, type: 'customer.subscription.updated', data: { object: { id: 'sub_unknown' } } },
      { ...base, id: 42, type: 'customer.subscription.updated', data: { object: { id: 'sub_unknown' } } },
      { ...base, id: 'evt_no_type', data: { object: { id: 'sub_unknown' } } },
    ]) {
      const { payload, header } = await w.fake.sign(event);
      const res = await post(payload, header);
      expect(res.status, res.text).toBe(400);
      expect(res.body.error.code).toBe('VALIDATION_ERROR');
    }
    expect(await countRows(w.t, 'stripe_events')).toBe(eventsBefore);
  });

  it('refuses a signature older than the tolerance (a replayed capture)', async () => {
    const { events } = await checkoutEvents(w);
    const payload = JSON.stringify(events[0]);
    const Stripe = (await import('stripe')).default;
    const old = await Stripe.webhooks.generateTestHeaderStringAsync({
      payload,
      secret: w.fake.webhookSecret,
      timestamp: Math.floor(Date.now() / 1000) - 3600,
    });
    expect((await post(payload, old)).status).toBe(400);
  });
});

describe('processing', () => {
  it('places the subscription from checkout.session.completed alone, re-reading Stripe', async () => {
    const { events, stripeSub, user, tier } = await checkoutEvents(w);
    const completed = events.find((e) => e.type === 'checkout.session.completed')!;
    const res = await w.fake.deliver(w.webhookUrl, completed);
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.data).toEqual({ received: true, eventId: completed.id, type: 'checkout.session.completed', outcome: 'created' });
    const row = await first<{ userId: string; tierId: string }>(
      w.t.db,
      sql`select user_id as "userId", tier_id as "tierId" from subscriptions where stripe_subscription_id = ${stripeSub.id}`,
    );
    expect(row).toEqual({ userId: user.userId, tierId: tier.id });
  });

  it('processes an event id once: a duplicate answers 200 and redoes nothing', async () => {
    const { events, stripeSub } = await checkoutEvents(w);
    const created = events.find((e) => e.type === 'customer.subscription.created')!;
    const first1 = await (await w.fake.deliver(w.webhookUrl, created)).json();
    expect(first1.data.outcome).toBe('created');
    // Stripe changes meanwhile; re-delivering the same event must not apply it (the id was processed).
    w.fake.subscriptions.get(stripeSub.id)!.cancel_at_period_end = true;
    const again = await w.fake.deliver(w.webhookUrl, created);
    expect(again.status).toBe(200);
    expect((await again.json()).data.outcome).toBe('duplicate');
    const row = await first<{ c: boolean }>(w.t.db, sql`select cancel_at_period_end as c from subscriptions where stripe_subscription_id = ${stripeSub.id}`);
    expect(row!.c).toBe(false);
  });

  it('answers 200 to event types it does not handle, and changes nothing', async () => {
    const before = await countRows(w.t, 'stripe_events');
    const { payload, header } = await w.fake.sign({
      id: 'evt_other_type',
      object: 'event',
      type: 'charge.refunded',
      created: 1,
      api_version: '2026-10-28.endive',
      livemode: false,
      data: { object: { id: 'ch_1', object: 'charge' } },
    });
    const res = await post(payload, header);
    expect(res.status).toBe(200);
    expect(res.body.data.outcome).toBe('ignored');
    expect(await countRows(w.t, 'stripe_events')).toBe(before);
  });

  it('records but does not apply subscriptions whose price no tier has', async () => {
    const { events, stripeSub } = await checkoutEvents(w);
    const created = events.find((e) => e.type === 'customer.subscription.created')!;
    const foreignPrice = { ...stripeSub.items.data[0].price, id: 'price_not_ours' };
    w.fake.subscriptions.get(stripeSub.id)!.items.data[0].price = foreignPrice;
    const res = await (await w.fake.deliver(w.webhookUrl, created)).json();
    expect(res.data.outcome).toBe('unknown_price');
    expect(await first(w.t.db, sql`select 1 as x from subscriptions where stripe_subscription_id = ${stripeSub.id}`)).toBeUndefined();
  });

  it("attack: a subscription switched to another agent's price keeps its own agent's tier without access (unknown_price), and still ends", async () => {
    // A portal configuration or the Dashboard can switch a subscription to any price; written as it was, the row held
    // another agent's tier under its own agent, and that tier's quotas.
    const agent = await activeAgent(w);
    const other = await activeAgent(w);
    const own = await paidTier(w, agent.id, { priceCents: 500 });
    const foreign = await paidTier(w, other.id, { priceCents: 9000 });
    const user = await signUp(w.t);
    const { stripeSubscriptionId, subscriptionId } = await buyPaidTier(w, user, own.id);
    const item = w.fake.subscriptions.get(stripeSubscriptionId)!.items.data[0];
    item.price = { ...item.price, id: foreign.stripePriceId, product: w.fake.prices.get(foreign.stripePriceId)!.product };
    const created = w.fake.events.find((e) => e.type === 'customer.subscription.created' && e.data.object.id === stripeSubscriptionId)!;
    const event = { ...created, id: `evt_switch_${subscriptionId}`, type: 'customer.subscription.updated' };
    const res = await (await w.fake.deliver(w.webhookUrl, event)).json();
    expect(res.data.outcome).toBe('unknown_price');
    const row = await first<{ tier_id: string; agent_id: string; status: string }>(
      w.t.db,
      sql`select tier_id, agent_id, status from subscriptions where id = ${subscriptionId}`,
    );
    // its own tier, and no access while it pays another price (a cheaper one would buy the dearer tier)
    expect(row).toEqual({ tier_id: own.id, agent_id: agent.id, status: 'incomplete' });
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).status).toBe(404);
    // and the row still follows Stripe in everything else: canceled there, it ends here (it stayed active for good)
    w.fake.takeEvents();
    await fetch(`${w.fake.url}/v1/subscriptions/${stripeSubscriptionId}`, { method: 'DELETE', headers: { authorization: `Bearer ${w.fake.secretKey}` } });
    await deliver(w, w.fake.takeEvents());
    expect(await first(w.t.db, sql`select status, tier_id from subscriptions where id = ${subscriptionId}`)).toEqual({ status: 'canceled', tier_id: own.id });
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).status).toBe(404);
  });

  it('attack: a subscription whose quantity is set to 0 (billed nothing) grants no access until it is 1 again', async () => {
    // A customer portal configured to allow quantity changes lets the subscriber set 0: Stripe then charges 0 x price,
    // and the tier was still served (found by a review).
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 5000 });
    const user = await signUp(w.t);
    const { stripeSubscriptionId, subscriptionId } = await buyPaidTier(w, user, tier.id);
    const item = w.fake.subscriptions.get(stripeSubscriptionId)!.items.data[0];
    const created = w.fake.events.find((e) => e.type === 'customer.subscription.created' && e.data.object.id === stripeSubscriptionId)!;
    const updated = (n: number) => ({ ...created, id: `evt_quantity_${n}_${subscriptionId}`, type: 'customer.subscription.updated' });
    const statusRow = () => first(w.t.db, sql`select status, tier_id from subscriptions where id = ${subscriptionId}`);

    item.quantity = 0;
    await deliver(w, [updated(0)]);
    expect(await statusRow()).toEqual({ status: 'incomplete', tier_id: tier.id });
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).status).toBe(404);

    item.quantity = 1;
    await deliver(w, [updated(1)]);
    expect(await statusRow()).toEqual({ status: 'active', tier_id: tier.id });
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).body.data).toMatchObject({ status: 'active' });
  });

  it('answers 5xx and records nothing when Stripe cannot be read, so Stripe retries', async () => {
    const { events, stripeSub } = await checkoutEvents(w);
    const created = events.find((e) => e.type === 'customer.subscription.created')!;
    const url = w.fake.url;
    await w.fake.close();
    try {
      const res = await w.fake.deliver(w.webhookUrl, created);
      expect(res.status).toBeGreaterThanOrEqual(500);
      expect(await first(w.t.db, sql`select 1 as x from stripe_events where id = ${created.id}`)).toBeUndefined();
    } finally {
      // Bring the fake back on the same port with the same state, and let Stripe's retry succeed.
      await w.fake.listen(Number(new URL(url).port));
    }
    const retry = await w.fake.deliver(w.webhookUrl, created);
    expect(retry.status).toBe(200);
    expect(await first(w.t.db, sql`select 1 as x from subscriptions where stripe_subscription_id = ${stripeSub.id}`)).toBeTruthy();
  });

  /** A user's paid subscription whose renewal payment has just failed at Stripe (its events not delivered yet). */
  async function renewalFailed() {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const user = await signUp(w.t);
    const { stripeSubscriptionId } = await buyPaidTier(w, user, tier.id);
    w.fake.setPaymentMode('fails');
    try {
      w.fake.advancePeriod(stripeSubscriptionId);
    } finally {
      w.fake.setPaymentMode('succeeds');
    }
    return { agent, user, stripeSubscriptionId };
  }

  it('marks a subscription past_due when a renewal fails (access kept) and active again once paid', async () => {
    const { agent, user, stripeSubscriptionId } = await renewalFailed();
    await deliver(w, w.fake.takeEvents());
    const pastDue = await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie });
    expect(pastDue.status).toBe(200);
    expect(pastDue.body.data.status).toBe('past_due');
    w.fake.payInvoice(w.fake.subscriptions.get(stripeSubscriptionId)!.latest_invoice);
    await deliver(w, w.fake.takeEvents());
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).body.data.status).toBe('active');
  });

  it('attack: a subscription whose payment retries ran out (Stripe: unpaid) grants no access until it is paid', async () => {
    // past_due grants access while Stripe retries the payment; once the retries are exhausted and the account leaves
    // the subscription open as unpaid, keeping access would be paid features for nothing, with no end.
    const { agent, user, stripeSubscriptionId } = await renewalFailed();
    w.fake.retriesExhausted(stripeSubscriptionId);
    await deliver(w, w.fake.takeEvents());
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).status).toBe(404);
    const row = await first<{ status: string }>(w.t.db, sql`select status from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`);
    expect(row!.status).toBe('incomplete');

    w.fake.payInvoice(w.fake.subscriptions.get(stripeSubscriptionId)!.latest_invoice);
    await deliver(w, w.fake.takeEvents());
    expect((await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).body.data.status).toBe('active');
  });

  it('handles every event type the contract lists (none answered "ignored"), records each, and converges on Stripe', async () => {
    // One subscription driven through everything that makes Stripe send the contract's events: a purchase, an
    // upgrade withdrawn (its invoice voided), an upgrade whose payment fails and then succeeds, a downgrade
    // withdrawn (schedule released), a downgrade that takes effect at renewal, and an immediate cancellation.
    const agent = await activeAgent(w);
    const small = await paidTier(w, agent.id, { priceCents: 500 });
    const medium = await paidTier(w, agent.id, { priceCents: 1000 });
    const large = await paidTier(w, agent.id, { priceCents: 2000 });
    const user = await signUp(w.t);
    const outcomes: Array<{ type: string; id: string; status: number; outcome: string }> = [];
    const deliverAll = async () => {
      for (const event of w.fake.takeEvents()) {
        const res = await w.fake.deliver(w.webhookUrl, event);
        const body = await res.json();
        outcomes.push({ type: event.type, id: event.id, status: res.status, outcome: body.data?.outcome });
      }
    };
    const admin = (method: 'post' | 'delete', path: string, json?: unknown) =>
      w.t.http[method](`/admin/subscriptions/${subscriptionId}${path}`, { cookie: w.admin.cookie, ...(json ? { json } : {}) });

    const checkout = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: medium.id } });
    w.fake.takeEvents();
    const stripeSub = w.fake.completeCheckout(checkout.body.data.sessionId);
    await deliverAll();
    const subscriptionId = (await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie })).body.data.id as string;

    w.fake.setPaymentMode('requires_action');
    try {
      expect((await admin('post', '/change-tier', { tierId: large.id })).status).toBe(200);
      await deliverAll();
      expect((await admin('delete', '/pending-change')).status).toBe(200); // voids the proration invoice
      await deliverAll();
      expect((await admin('post', '/change-tier', { tierId: large.id })).status).toBe(200);
      await deliverAll();
      const invoice = w.fake.subscriptions.get(stripeSub.id)!.latest_invoice;
      w.fake.failInvoice(invoice);
      w.fake.payInvoice(invoice); // the pending update applies
      await deliverAll();
    } finally {
      w.fake.setPaymentMode('succeeds');
    }
    expect((await admin('post', '/change-tier', { tierId: small.id })).status).toBe(200); // a schedule
    await deliverAll();
    expect((await admin('delete', '/pending-change')).status).toBe(200); // released
    await deliverAll();
    expect((await admin('post', '/change-tier', { tierId: small.id })).status).toBe(200);
    w.fake.advancePeriod(stripeSub.id); // the schedule's next phase: the downgrade takes effect
    await deliverAll();
    // The fake does not model a schedule reaching its end by itself; Stripe's event for it carries the schedule.
    const schedule = w.fake.schedules.get(w.fake.subscriptions.get(stripeSub.id)!.schedule)!;
    const completed = { ...w.fake.events.at(-1)!, id: 'evt_schedule_completed_1', type: 'subscription_schedule.completed', data: { object: { ...structuredClone(schedule), status: 'completed', completed_at: w.fake.now() } } };
    const completedRes = await w.fake.deliver(w.webhookUrl, completed);
    outcomes.push({ type: completed.type, id: completed.id, status: completedRes.status, outcome: (await completedRes.json()).data?.outcome });
    expect((await admin('post', '/cancel', { immediate: true })).status).toBe(200); // subscription deleted, schedule canceled
    await deliverAll();

    const handled = outcomes.filter((o) => (CONTRACT_STRIPE_EVENTS as readonly string[]).includes(o.type));
    expect(CONTRACT_STRIPE_EVENTS.filter((type) => !handled.some((o) => o.type === type))).toEqual([]);
    for (const o of handled) {
      expect(o, JSON.stringify(o)).toMatchObject({ status: 200 });
      expect(['ignored', 'duplicate', undefined], JSON.stringify(o)).not.toContain(o.outcome);
    }
    const recorded = new Set((await rows<{ id: string }>(w.t.db, sql`select id from stripe_events`)).map((r) => r.id));
    expect(handled.filter((o) => !recorded.has(o.id)).map((o) => o.type)).toEqual([]);
    // what the service shows is what Stripe holds
    const mine = await w.t.http.get(`/admin/subscriptions?userId=${user.userId}`, { cookie: w.admin.cookie });
    const local = mine.body.data.find((s: { id: string }) => s.id === subscriptionId);
    const remote = w.fake.subscriptions.get(stripeSub.id)!;
    expect(local).toMatchObject({ status: 'canceled', tierId: small.id, pendingTierId: null });
    expect(remote).toMatchObject({ status: 'canceled' });
    expect(remote.items.data[0].price.id).toBe(small.stripePriceId);
    expect(local.currentPeriodEnd).toBe(new Date(remote.items.data[0].current_period_end * 1000).toISOString());
  });
});

describe('database roles', () => {
  it('keeps the state-writing function and billing tables away from the PostgREST roles', async () => {
    for (const role of ['anon', 'authenticated']) {
      const attempt = w.t.db.transaction().execute(async (trx) => {
        await sql`select set_config('role', ${role}, true)`.execute(trx);
        await sql`select * from public.billing_apply_stripe_subscription(
          'evt_x', 'customer.subscription.updated', 'sub_x', 'cus_x', 'u', 'price_x', 'active',
          now(), now() + interval '1 month', false, null, null, null, null, null, now())`.execute(trx);
      });
      await expect(attempt).rejects.toThrow(/permission denied/);
      const read = w.t.db.transaction().execute(async (trx) => {
        await sql`select set_config('role', ${role}, true)`.execute(trx);
        await sql`select * from public.stripe_events`.execute(trx);
      });
      await expect(read).rejects.toThrow(/permission denied/);
    }
  });
});
