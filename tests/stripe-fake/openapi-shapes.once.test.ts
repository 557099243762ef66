import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStripeFake, type StripeFake } from './server.ts';
import { StripeSpec, type ShapeProblem } from './spec-check.ts';

/**
 * The fake Stripe server cannot drift from the real API's shapes: every object it answers or sends in an event,
 * in every state the marketplace drives it through, is checked against Stripe's schema for that object as the
 * pinned `stripe` package declares it (generated from Stripe's OpenAPI document, revision in
 * node_modules/stripe/OPENAPI_VERSION; see spec-check.ts): required properties present, nothing invented, each
 * value of the declared type, recursively. The fake is driven through the real SDK, as the app drives it.
 */

/** Stripe type of each object the fake serves, by the object's `object` field. */
const TYPE_OF_OBJECT: Record<string, string> = {
  customer: 'Customer',
  product: 'Product',
  price: 'Price',
  'checkout.session': 'Checkout.Session',
  subscription: 'Subscription',
  invoice: 'Invoice',
  subscription_schedule: 'SubscriptionSchedule',
  'billing_portal.session': 'BillingPortal.Session',
  'billing_portal.configuration': 'BillingPortal.Configuration',
  invoice_payment: 'InvoicePayment',
  refund: 'Refund',
  dispute: 'Dispute',
};

let spec: StripeSpec;
let fake: StripeFake;
let stripe: Stripe;
/** Every object the fake answered, with where it came from. */
const answered: Array<{ what: string; object: Record<string, any> }> = [];

function record<T extends object>(what: string, response: T): T {
  const { lastResponse: _, ...parsed } = response as Record<string, any>;
  // back to the wire format: the SDK turns decimal strings into Decimal objects, whose JSON is the string again
  answered.push({ what, object: JSON.parse(JSON.stringify(parsed)) });
  return response;
}

function problemsOf(object: Record<string, any>): ShapeProblem[] {
  const name = TYPE_OF_OBJECT[object.object];
  if (!name) return [{ path: '', problem: `the fake serves an object the test does not know: ${object.object}` }];
  return spec.check(name, object);
}

beforeAll(async () => {
  spec = new StripeSpec([...Object.values(TYPE_OF_OBJECT), 'Event', 'ApiList<Stripe.Invoice>', 'ApiList<Stripe.InvoicePayment>']);
  fake = await startStripeFake();
  stripe = fake.client();

  // Catalog: a product with a monthly and a yearly price; one archived.
  const product = record('product created', await stripe.products.create({ name: 'Agent Pro', metadata: { tierId: 't1' } }));
  record('product updated', await stripe.products.update(product.id, { name: 'Agent Pro+' }));
  const monthly = record('price created', await stripe.prices.create({ product: product.id, unit_amount: 900, currency: 'usd', recurring: { interval: 'month' } }));
  const bigger = record('price created', await stripe.prices.create({ product: product.id, unit_amount: 2900, currency: 'usd', recurring: { interval: 'month' } }));
  const yearly = record('price created', await stripe.prices.create({ product: product.id, unit_amount: 9000, currency: 'usd', recurring: { interval: 'year' } }));
  record('price archived', await stripe.prices.update(yearly.id, { active: false }));
  record('price retrieved', await stripe.prices.retrieve(monthly.id));
  record('product retrieved', await stripe.products.retrieve(product.id));

  // Checkout for a known customer, and an anonymous one (the buyer types an email on Stripe's page).
  const customer = record('customer created', await stripe.customers.create({ email: 'buyer@example.com', name: 'Buyer', metadata: { userId: 'u1' } }));
  record('customer retrieved', await stripe.customers.retrieve(customer.id));
  const known = record(
    'checkout session created',
    await stripe.checkout.sessions.create({
      mode: 'subscription',
      customer: customer.id,
      line_items: [{ price: monthly.id, quantity: 1 }],
      success_url: 'https://market.example/ok',
      cancel_url: 'https://market.example/cancel',
      client_reference_id: 'u1',
      metadata: { tierId: 't1' },
      subscription_data: { metadata: { tierId: 't1' } },
    }),
  );
  record('open checkout session retrieved', await stripe.checkout.sessions.retrieve(known.id));
  const sub = fake.completeCheckout(known.id);
  record('completed checkout session retrieved', await stripe.checkout.sessions.retrieve(known.id));
  const anonymous = record(
    'anonymous checkout session created',
    await stripe.checkout.sessions.create({ mode: 'subscription', customer_email: 'anon@example.com', line_items: [{ price: monthly.id, quantity: 1 }], success_url: 'https://market.example/ok' }),
  );
  const anonymousSub = fake.completeCheckout(anonymous.id, { name: 'Anon' });
  record('completed anonymous checkout session retrieved', await stripe.checkout.sessions.retrieve(anonymous.id));

  // Subscriptions: expanded reads, an upgrade charged now, a pending update, past_due, cancel at period end.
  record('subscription retrieved', await stripe.subscriptions.retrieve(sub.id));
  record('subscription retrieved (expanded)', await stripe.subscriptions.retrieve(sub.id, { expand: ['latest_invoice', 'schedule'] }));
  const item = sub.items.data[0].id;
  record('subscription upgraded', await stripe.subscriptions.update(sub.id, { items: [{ id: item, price: bigger.id }], proration_behavior: 'always_invoice' }));
  fake.setPaymentMode('requires_action');
  const pending = record(
    'subscription with a pending update',
    await stripe.subscriptions.update(anonymousSub.id, {
      items: [{ id: anonymousSub.items.data[0].id, price: bigger.id }],
      proration_behavior: 'always_invoice',
      payment_behavior: 'pending_if_incomplete',
    }),
  );
  const pendingInvoice = typeof pending.latest_invoice === 'string' ? pending.latest_invoice : pending.latest_invoice!.id!;
  record('open invoice retrieved', await stripe.invoices.retrieve(pendingInvoice));
  fake.failInvoice(pendingInvoice);
  fake.payInvoice(pendingInvoice);
  record('paid invoice retrieved', await stripe.invoices.retrieve(pendingInvoice));
  // Its payment, refunded (what the marketplace does to a duplicate purchase).
  const payments = await stripe.invoicePayments.list({ invoice: pendingInvoice });
  expect(spec.check('ApiList<Stripe.InvoicePayment>', { ...payments, data: payments.data })).toEqual([]);
  for (const payment of payments.data) record('listed invoice payment', payment);
  const paymentIntent = payments.data[0]!.payment.payment_intent as string;
  record('refund created', await stripe.refunds.create({ payment_intent: paymentIntent, reason: 'duplicate', metadata: { why: 'test' } }));
  // A chargeback on that payment (sent as charge.dispute.created), and the payment found again by its payment intent.
  record('dispute', fake.dispute(pendingInvoice));
  const byIntent = await stripe.invoicePayments.list({ payment: { type: 'payment_intent', payment_intent: paymentIntent } });
  expect(byIntent.data.map((p) => p.invoice)).toEqual([pendingInvoice]);
  fake.setPaymentMode('fails');
  fake.advancePeriod(anonymousSub.id);
  record('past_due subscription retrieved (expanded)', await stripe.subscriptions.retrieve(anonymousSub.id, { expand: ['latest_invoice'] }));
  const invoices = await stripe.invoices.list({ subscription: anonymousSub.id, status: 'open' });
  expect(spec.check('ApiList<Stripe.Invoice>', { ...invoices, data: invoices.data })).toEqual([]);
  for (const invoice of invoices.data) record('listed invoice', invoice);
  const voided = record('invoice voided', await stripe.invoices.voidInvoice(invoices.data[0]!.id!));
  expect(voided.status).toBe('void');
  fake.setPaymentMode('succeeds');
  record('subscription set to cancel at period end', await stripe.subscriptions.update(anonymousSub.id, { cancel_at_period_end: true }));
  fake.advancePeriod(anonymousSub.id);
  record('subscription canceled at period end', await stripe.subscriptions.retrieve(anonymousSub.id));

  // Schedules: a downgrade at period end, then released; another canceled with its subscription.
  const schedule = record('schedule created', await stripe.subscriptionSchedules.create({ from_subscription: sub.id }));
  record(
    'schedule updated',
    await stripe.subscriptionSchedules.update(schedule.id, {
      end_behavior: 'release',
      phases: [
        { items: [{ price: bigger.id, quantity: 1 }], start_date: schedule.phases[0]!.start_date, end_date: schedule.phases[0]!.end_date },
        { items: [{ price: monthly.id, quantity: 1 }], duration: { interval: 'month', interval_count: 1 } },
      ],
    }),
  );
  record('schedule retrieved', await stripe.subscriptionSchedules.retrieve(schedule.id));
  record('subscription with a schedule (expanded)', await stripe.subscriptions.retrieve(sub.id, { expand: ['schedule'] }));
  fake.advancePeriod(sub.id);
  record('schedule released', await stripe.subscriptionSchedules.release(schedule.id));
  const second = record('schedule created again', await stripe.subscriptionSchedules.create({ from_subscription: sub.id }));
  record('subscription canceled now', await stripe.subscriptions.cancel(sub.id));
  record('schedule canceled with its subscription', await stripe.subscriptionSchedules.retrieve(second.id));

  // Portal configurations: the account's default, one made, listed and changed.
  record('default portal configuration', await stripe.billingPortal.configurations.retrieve('bpc_fake_default'));
  const configuration = record(
    'portal configuration created',
    await stripe.billingPortal.configurations.create({
      features: { subscription_update: { enabled: false }, subscription_cancel: { enabled: true, mode: 'at_period_end' }, customer_update: { enabled: true, allowed_updates: ['address'] } },
      metadata: { mark: 'v1' },
    }),
  );
  for (const c of (await stripe.billingPortal.configurations.list({ active: true })).data) record('portal configuration listed', c);
  record('portal configuration deactivated', await stripe.billingPortal.configurations.update(configuration.id, { active: false }));
  record('portal configuration reactivated', await stripe.billingPortal.configurations.update(configuration.id, { active: true }));

  // Portal sessions, plain and with the cancel flow.
  record('portal session', await stripe.billingPortal.sessions.create({ customer: customer.id, return_url: 'https://market.example/account' }));
  record('portal session with a configuration', await stripe.billingPortal.sessions.create({ customer: customer.id, configuration: configuration.id }));
  const other = fake.completeCheckout(
    (await stripe.checkout.sessions.create({ mode: 'subscription', customer: customer.id, line_items: [{ price: monthly.id }], success_url: 'https://market.example/ok' })).id,
  );
  record(
    'portal session with the cancel flow',
    await stripe.billingPortal.sessions.create({
      customer: customer.id,
      flow_data: { type: 'subscription_cancel', subscription_cancel: { subscription: other.id } },
    }),
  );
}, 120_000);
afterAll(() => fake?.close());

describe("the fake Stripe server's objects match Stripe's schemas", () => {
  it('covers every object type the fake serves', () => {
    expect(new Set(answered.map((a) => a.object.object))).toEqual(new Set(Object.keys(TYPE_OF_OBJECT)));
  });

  it('answers: required fields present, nothing invented, every value of its declared type', () => {
    const problems = answered.flatMap(({ what, object }) => problemsOf(object).map((p) => `${what}: ${p.path} ${p.problem}`));
    expect(problems).toEqual([]);
  });

  it('events: each is a Stripe.Event of its type, and its data.object the object its type names', () => {
    const events = fake.takeEvents();
    expect(events.length).toBeGreaterThan(20);
    const problems = events.flatMap((event) => [
      ...spec.check('Event', event).map((p) => `${event.type}: ${p.path} ${p.problem}`),
      ...problemsOf(event.data.object).map((p) => `${event.type} data.object: ${p.path} ${p.problem}`),
    ]);
    expect(problems).toEqual([]);
    // the marketplace's webhook handles these (contract.md, Webhook); the fake sends each of them in this run
    const sent = new Set(events.map((e) => e.type));
    const handled = [
      'checkout.session.completed',
      'customer.subscription.created',
      'customer.subscription.updated',
      'customer.subscription.deleted',
      'customer.subscription.pending_update_applied',
      'invoice.paid',
      'invoice.payment_succeeded',
      'invoice.payment_failed',
      'invoice.voided',
      'subscription_schedule.updated',
      'subscription_schedule.released',
      'subscription_schedule.canceled',
    ];
    expect(handled.filter((type) => !sent.has(type))).toEqual([]);
  });

  it('the checker itself refuses what Stripe would not send (a missing field, an invented one, a wrong type, a wrong tag, a null where none is allowed)', () => {
    const subscription = answered.find((a) => a.object.object === 'subscription')!.object;
    const { status: _status, ...withoutStatus } = subscription;
    expect(spec.check('Subscription', withoutStatus)).toEqual([{ path: 'Subscription.status', problem: 'required by the spec, missing' }]);
    expect(spec.check('Subscription', { ...subscription, current_period_end: 1 })).toEqual([
      { path: 'Subscription.current_period_end', problem: 'not in the spec' },
    ]);
    expect(spec.check('Subscription', { ...subscription, cancel_at_period_end: 'false' })).toHaveLength(1);
    expect(spec.check('Subscription', { ...subscription, object: 'subscriptions' })).toHaveLength(1);
    expect(spec.check('Subscription', { ...subscription, items: { ...subscription.items, has_more: null } })).toHaveLength(1);
    expect(spec.check('Subscription', { ...subscription, customer: { id: 'cus_1', object: 'customer' } }).length).toBeGreaterThan(0);
  });
});
