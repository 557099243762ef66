import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';
import { parseStripeForm } from './form.ts';
import {
  checkoutCustomerDetails,
  checkoutSessionObject,
  customerObject,
  disputeObject,
  invoiceObject,
  invoicePaymentObject,
  portalConfigurationObject,
  portalSessionObject,
  priceObject,
  productObject,
  refundObject,
  schedulePhaseObject,
  setItemPrice,
  subscriptionItemObject,
  subscriptionObject,
  subscriptionScheduleObject,
} from './objects.ts';

/**
 * A stateful, Stripe-compatible HTTP server for tests and benchmarks. The app reaches it through STRIPE_API_URL
 * with the real `stripe` SDK, so every request the app makes is a real SDK request (form-encoded, bearer key,
 * idempotency keys) and every answer has the shape of the pinned API version's objects (objects.ts builds them
 * whole; openapi-shapes.once.test.ts checks them against the SDK's schemas).
 *
 * What it models (only what the marketplace uses): customers, products, prices, Checkout Sessions in
 * subscription mode, subscriptions with one item and `pending_update` (payment_behavior=pending_if_incomplete),
 * subscription schedules (from_subscription, phases, release), invoices (open, paid, void, uncollectible), billing portal
 * sessions. Each change records the events Stripe would send; tests take them with `takeEvents()` and deliver
 * them signed (the SDK's generateTestHeaderString) with `deliver()`, in any order and as often as they like.
 *
 * Test controls stand in for what a customer or Stripe's clock would do: `completeCheckout` (the customer pays
 * on the hosted page), `payInvoice` / `failInvoice` / `markUncollectible`, `advancePeriod` (a billing cycle ends),
 * `setPaymentMode`, `dispute` (the cardholder's bank opens a chargeback).
 */

export const FAKE_SECRET_KEY = 'sk_test_fake_marketplace';
export const FAKE_WEBHOOK_SECRET = 'whsec_fake_marketplace_0123456789';

type Json = Record<string, any>;

export interface FakeEvent {
  id: string;
  object: 'event';
  type: string;
  created: number;
  api_version: string;
  livemode: false;
  pending_webhooks: number;
  request: { id: string | null; idempotency_key: string | null };
  data: { object: Json };
}

export type PaymentMode = 'succeeds' | 'requires_action' | 'fails';

class StripeApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly type: string;
  readonly param: string | undefined;
  constructor(status: number, message: string, code = 'resource_missing', type = 'invalid_request_error', param?: string) {
    super(message);
    this.status = status;
    this.code = code;
    this.type = type;
    this.param = param;
  }
}

const DAY = 86_400;

export class StripeFake {
  readonly secretKey = FAKE_SECRET_KEY;
  readonly webhookSecret = FAKE_WEBHOOK_SECRET;
  url = '';
  /** Every request the fake served, for tests that assert what the app asked Stripe to do. */
  readonly requests: Array<{ method: string; path: string; body: Json }> = [];
  readonly events: FakeEvent[] = [];

  #server: Server | undefined;
  #seq = 0;
  #taken = 0;
  #now: number | undefined;
  #paymentMode: PaymentMode = 'succeeds';
  #failing = new Map<string, { status: number; type: string; code?: string }>();
  #idempotent = new Map<string, { status: number; body: string }>();
  #held = new Map<string, { reached: () => void; answer: Promise<void> }>();

  readonly customers = new Map<string, Json>();
  readonly products = new Map<string, Json>();
  readonly prices = new Map<string, Json>();
  readonly sessions = new Map<string, Json>();
  readonly subscriptions = new Map<string, Json>();
  readonly schedules = new Map<string, Json>();
  readonly invoices = new Map<string, Json>();
  readonly portalSessions = new Map<string, Json>();
  /** Customer portal configurations; the account's default (`bpc_fake_default`) lets customers switch plans. */
  readonly portalConfigurations = new Map<string, Json>([
    [
      'bpc_fake_default',
      portalConfigurationObject({
        id: 'bpc_fake_default',
        created: Math.floor(Date.now() / 1000),
        is_default: true,
        features: {
          subscription_update: { enabled: 'true', default_allowed_updates: ['price', 'quantity', 'promotion_code'] },
          subscription_cancel: { enabled: 'true', mode: 'at_period_end' },
          payment_method_update: { enabled: 'true' },
          invoice_history: { enabled: 'true' },
        },
        metadata: {},
      }),
    ],
  ]);
  /** Payments of paid invoices, by invoice id (each paid through a payment intent). */
  readonly invoicePayments = new Map<string, Json>();
  readonly refunds = new Map<string, Json>();

  /** Unix seconds: real time unless a test pinned it. */
  now(): number {
    return this.#now ?? Math.floor(Date.now() / 1000);
  }
  setNow(date: Date | string | number): void {
    this.#now = Math.floor(new Date(date).getTime() / 1000);
  }
  /** Requests (`METHOD /v1/path`) answered with an error (500 unless given) until `recover()`: Stripe failing for one kind of call. */
  outage(request: string, answer: { status: number; type: string; code?: string } = { status: 500, type: 'api_error' }): void {
    this.#failing.set(request, answer);
  }
  recover(): void {
    this.#failing.clear();
  }
  /**
   * The next request `METHOD /v1/path` waits unanswered until `release()` (Stripe slow to answer one call); `reached`
   * resolves once it arrived. Only the next one: later requests of the same kind are answered at once.
   */
  hold(request: string): { reached: Promise<void>; release(): void } {
    let reached!: () => void;
    let release!: () => void;
    const arrived = new Promise<void>((resolve) => (reached = resolve));
    this.#held.set(request, { reached, answer: new Promise<void>((resolve) => (release = resolve)) });
    return { reached: arrived, release };
  }

  /** How the customer's card behaves on the next charges (upgrades, renewals). Checkout always succeeds. */
  setPaymentMode(mode: PaymentMode): void {
    this.#paymentMode = mode;
  }

  async start(): Promise<this> {
    return this.listen(0);
  }

  /** Serves on a port (0: any free one). Tests that take the fake down use it to bring it back with its state. */
  async listen(port: number): Promise<this> {
    this.#server = createServer((req, res) => void this.#handle(req, res));
    await new Promise<void>((resolve) => this.#server!.listen(port, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    if (!this.#server) return;
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server!.close(() => resolve()));
  }

  /** The real SDK pointed at this fake, as the app's is: for a test's own calls (another deployment's checkout, ...). */
  client(): Stripe {
    const url = new URL(this.url);
    return new Stripe(this.secretKey, { host: url.hostname, port: Number(url.port), protocol: 'http', maxNetworkRetries: 0 });
  }

  /** Environment that points the app at this fake. */
  env(): Record<string, string> {
    return { STRIPE_SECRET_KEY: this.secretKey, STRIPE_WEBHOOK_SECRET: this.webhookSecret, STRIPE_API_URL: this.url };
  }

  // ---------------------------------------------------------------- events

  /** Events recorded since the previous call. */
  takeEvents(): FakeEvent[] {
    const out = this.events.slice(this.#taken);
    this.#taken = this.events.length;
    return out;
  }

  /** The raw body and Stripe-Signature header Stripe would send for an event. */
  async sign(event: FakeEvent | Json, secret = this.webhookSecret): Promise<{ payload: string; header: string }> {
    const payload = JSON.stringify(event);
    const header = await Stripe.webhooks.generateTestHeaderStringAsync({ payload, secret, timestamp: Math.floor(Date.now() / 1000) });
    return { payload, header };
  }

  /** POSTs a signed event to a webhook URL, as Stripe does. */
  async deliver(webhookUrl: string, event: FakeEvent): Promise<Response> {
    const { payload, header } = await this.sign(event);
    return fetch(webhookUrl, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': header }, body: payload });
  }

  #emit(type: string, object: Json): void {
    this.events.push({
      id: this.#id('evt'),
      object: 'event',
      type,
      created: this.now(),
      api_version: Stripe.API_VERSION,
      livemode: false,
      pending_webhooks: 1,
      request: { id: null, idempotency_key: null },
      data: { object: structuredClone(object) },
    });
  }

  #id(prefix: string): string {
    this.#seq += 1;
    return `${prefix}_fake${this.#seq.toString().padStart(6, '0')}${Math.random().toString(36).slice(2, 8)}`;
  }

  // ---------------------------------------------------------------- test controls

  /**
   * The customer pays on the hosted Checkout page: customer, subscription and paid invoice appear. With
   * `payment: 'pending'` the first payment is not made yet (3-D Secure left unanswered, a bank debit still under way):
   * the subscription is `incomplete` with its invoice open, until `payInvoice` (active) or `expireIncomplete`.
   */
  completeCheckout(sessionId: string, options: { email?: string; name?: string; payment?: 'paid' | 'pending' } = {}): Json {
    const session = this.#get(this.sessions, sessionId, 'checkout.session');
    if (session.status !== 'open') throw new Error(`checkout session ${sessionId} is ${session.status}`);
    let customerId: string = session.customer;
    if (!customerId) {
      const email = options.email ?? session.customer_email;
      if (!email) throw new Error('anonymous checkout needs the email the buyer typed');
      const customer = this.#createCustomer({ email, name: options.name ?? null, metadata: {} });
      customerId = customer.id;
    }
    const customer = this.customers.get(customerId)!;
    const price = this.#get(this.prices, session._line_items[0].price, 'price');
    const sub = this.#createSubscription(customerId, price, session._subscription_metadata ?? {});
    const invoice = this.#createInvoice(sub, price.unit_amount, 'subscription_create');
    const paid = options.payment !== 'pending';
    if (paid) this.#markPaid(invoice);
    else sub.status = 'incomplete';
    sub.latest_invoice = invoice.id;
    Object.assign(session, {
      status: 'complete',
      payment_status: paid ? 'paid' : 'unpaid',
      customer: customerId,
      subscription: sub.id,
      customer_details: checkoutCustomerDetails(customer),
    });
    this.#emit('customer.subscription.created', sub);
    this.#emit('invoice.created', invoice);
    this.#emit('invoice.finalized', invoice);
    if (paid) {
      this.#emit('invoice.paid', invoice);
      this.#emit('invoice.payment_succeeded', invoice);
    }
    this.#emit('checkout.session.completed', this.#sessionView(session));
    return sub;
  }

  /** An incomplete subscription's first invoice was not paid within 23 hours: Stripe ends it and voids the invoice. */
  expireIncomplete(subscriptionId: string): void {
    const sub = this.#get(this.subscriptions, subscriptionId, 'subscription');
    if (sub.status !== 'incomplete') throw new Error(`subscription ${subscriptionId} is ${sub.status}, not incomplete`);
    sub.status = 'incomplete_expired';
    sub.ended_at = this.now();
    const invoice = this.invoices.get(sub.latest_invoice);
    if (invoice?.status === 'open') {
      invoice.status = 'void';
      invoice.status_transitions.voided_at = this.now();
      this.#emit('invoice.voided', invoice);
    }
    this.#emit('customer.subscription.updated', sub);
  }

  /**
   * The customer cancels in the customer portal ("cancel at period end"). The subscriptions Checkout makes are in
   * flexible billing mode (Stripe's default since API version 2025-09-30), which records that as `cancel_at` = the
   * period's end with `cancel_at_period_end` false (Stripe's "Compare classic and flexible billing mode"); the
   * subscription then ends when that period does (advancePeriod).
   */
  cancelInPortal(subscriptionId: string): void {
    const sub = this.#get(this.subscriptions, subscriptionId, 'subscription');
    if (sub.status === 'canceled') throw new Error(`subscription ${subscriptionId} is canceled`);
    sub.cancel_at = sub.items.data[0].current_period_end;
    sub.cancel_at_period_end = false;
    sub.canceled_at = this.now();
    this.#emit('customer.subscription.updated', sub);
  }

  /**
   * The customer is deleted at Stripe (the Dashboard, or DELETE /v1/customers/{id}): "Permanently deletes a customer.
   * It cannot be undone. Also immediately cancels any active subscriptions on the customer" (Stripe's API reference).
   * Every later request naming it answers "No such customer"; its subscriptions stay readable, canceled.
   */
  deleteCustomer(customerId: string): void {
    const customer = this.#get(this.customers, customerId, 'customer');
    for (const sub of this.subscriptions.values()) {
      if (sub.customer === customerId && sub.status !== 'canceled' && sub.status !== 'incomplete_expired') this.#cancelNow(sub);
    }
    this.customers.delete(customerId);
    this.#emit('customer.deleted', customer);
  }

  /**
   * Stripe pauses the subscription (a trial ended without a payment method; in flexible billing mode also its pause
   * endpoint and the portal's pause): status `paused`, no invoices, and `customer.subscription.paused` is sent. Resumed,
   * it is active again and `customer.subscription.resumed` is sent. Only those events: whether Stripe also sends
   * `customer.subscription.updated` is not documented, so the service must not need it.
   */
  pause(subscriptionId: string): void {
    const sub = this.#get(this.subscriptions, subscriptionId, 'subscription');
    sub.status = 'paused';
    this.#emit('customer.subscription.paused', sub);
  }

  resume(subscriptionId: string): void {
    const sub = this.#get(this.subscriptions, subscriptionId, 'subscription');
    if (sub.status !== 'paused') throw new Error(`subscription ${subscriptionId} is ${sub.status}, not paused`);
    sub.status = 'active';
    this.#emit('customer.subscription.resumed', sub);
  }

  /** The customer pays an open invoice (e.g. the proration of an upgrade): a pending update is applied. */
  payInvoice(invoiceId: string): void {
    const invoice = this.#get(this.invoices, invoiceId, 'invoice');
    // Stripe takes a payment of an invoice marked uncollectible too.
    if (invoice.status !== 'open' && invoice.status !== 'uncollectible') throw new Error(`invoice ${invoiceId} is ${invoice.status}`);
    this.#markPaid(invoice);
    this.#emit('invoice.paid', invoice);
    this.#emit('invoice.payment_succeeded', invoice);
    const sub = this.subscriptions.get(invoice.parent?.subscription_details?.subscription);
    if (!sub) return;
    if (sub.pending_update && sub.latest_invoice === invoice.id) {
      const item = sub.pending_update.subscription_items[0];
      setItemPrice(sub.items.data[0], item.price);
      sub.pending_update = null;
      if (sub.status === 'past_due') sub.status = 'active';
      this.#emit('customer.subscription.updated', sub);
      this.#emit('customer.subscription.pending_update_applied', sub);
    } else if (sub.status === 'past_due' || sub.status === 'unpaid' || sub.status === 'incomplete') {
      sub.status = 'active';
      this.#emit('customer.subscription.updated', sub);
    }
  }

  /**
   * Stripe's retries of a past_due subscription's invoice are exhausted, and the account's billing settings leave the
   * subscription open as `unpaid` (the alternative setting cancels it). Paying the invoice later makes it active.
   */
  retriesExhausted(subscriptionId: string): void {
    const sub = this.#get(this.subscriptions, subscriptionId, 'subscription');
    if (sub.status !== 'past_due') throw new Error(`subscription ${subscriptionId} is ${sub.status}, not past_due`);
    sub.status = 'unpaid';
    this.#emit('customer.subscription.updated', sub);
  }

  /**
   * The cardholder's bank opens a chargeback on an invoice's payment: Stripe takes the amount back from the account's
   * balance and sends `charge.dispute.created`. The subscription itself stays as it is at Stripe (a dispute never
   * ends one). Returns the dispute.
   */
  dispute(invoiceId: string, reason = 'fraudulent'): Json {
    const payment = this.invoicePayments.get(invoiceId);
    if (!payment) throw new Error(`invoice ${invoiceId} has no payment to dispute`);
    const dispute = disputeObject({
      id: this.#id('dp'),
      created: this.now(),
      amount: payment.amount_paid,
      currency: payment.currency,
      payment_intent: payment.payment.payment_intent,
      reason,
    });
    this.#emit('charge.dispute.created', dispute);
    return dispute;
  }

  /**
   * Every retry of an open invoice failed and the account's billing settings mark such invoices uncollectible (Stripe's
   * "Manage failed payments": the invoice setting, beside the subscription's). As at Stripe, a past_due subscription
   * whose latest invoice that was becomes `active` again: nothing is left to collect.
   */
  markUncollectible(invoiceId: string): void {
    const invoice = this.#get(this.invoices, invoiceId, 'invoice');
    if (invoice.status !== 'open') throw new Error(`invoice ${invoiceId} is ${invoice.status}`);
    invoice.status = 'uncollectible';
    invoice.status_transitions.marked_uncollectible_at = this.now();
    this.#emit('invoice.marked_uncollectible', invoice);
    const sub = this.subscriptions.get(invoice.parent?.subscription_details?.subscription);
    if (sub && sub.latest_invoice === invoice.id && sub.status === 'past_due') {
      sub.status = 'active';
      this.#emit('customer.subscription.updated', sub);
    }
  }

  /** A payment attempt on an open invoice fails. */
  failInvoice(invoiceId: string): void {
    const invoice = this.#get(this.invoices, invoiceId, 'invoice');
    invoice.attempt_count += 1;
    this.#emit('invoice.payment_failed', invoice);
  }

  /**
   * The current billing period of a subscription ends: it is canceled when set to cancel at period end,
   * otherwise the schedule's next phase (if any) takes over and the renewal invoice is charged.
   */
  advancePeriod(subscriptionId: string): void {
    const sub = this.#get(this.subscriptions, subscriptionId, 'subscription');
    if (sub.status === 'canceled') throw new Error('subscription already canceled');
    const item = sub.items.data[0];
    const boundary: number = item.current_period_end;
    if (this.now() < boundary) this.#now = boundary;
    if (sub.cancel_at_period_end || (sub.cancel_at !== null && sub.cancel_at <= boundary)) {
      this.#cancelNow(sub);
      return;
    }
    const schedule = sub.schedule ? this.schedules.get(sub.schedule) : undefined;
    if (schedule) {
      const next = schedule.phases.find((p: Json) => p.start_date >= boundary);
      if (next) {
        setItemPrice(item, this.#get(this.prices, next.items[0].price, 'price'));
        schedule.current_phase = { start_date: next.start_date, end_date: next.end_date };
        this.#emit('subscription_schedule.updated', schedule);
      } else {
        schedule.status = 'released';
        schedule.released_at = this.now();
        schedule.released_subscription = sub.id;
        schedule.subscription = null;
        schedule.current_phase = null;
        sub.schedule = null;
        this.#emit('subscription_schedule.released', schedule);
      }
    }
    item.current_period_start = boundary;
    item.current_period_end = addInterval(boundary, item.price.recurring.interval);
    const invoice = this.#createInvoice(sub, item.price.unit_amount, 'subscription_cycle');
    sub.latest_invoice = invoice.id;
    this.#emit('invoice.created', invoice);
    if (this.#paymentMode === 'succeeds') {
      this.#markPaid(invoice);
      this.#emit('invoice.paid', invoice);
      this.#emit('invoice.payment_succeeded', invoice);
    } else {
      sub.status = 'past_due';
      this.#emit('invoice.payment_failed', invoice);
    }
    this.#emit('customer.subscription.updated', sub);
  }

  // ---------------------------------------------------------------- HTTP

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const url = new URL(req.url ?? '/', 'http://fake');
    const method = req.method ?? 'GET';
    const body = method === 'GET' || method === 'DELETE' ? parseStripeForm(url.search.slice(1)) : parseStripeForm(Buffer.concat(chunks).toString());
    this.requests.push({ method, path: url.pathname, body });
    const send = (status: number, text: string) => {
      res.writeHead(status, { 'content-type': 'application/json', 'request-id': `req_${this.#seq}` });
      res.end(text);
    };
    if (req.headers.authorization !== `Bearer ${this.secretKey}`) {
      send(401, JSON.stringify({ error: { type: 'invalid_request_error', message: 'Invalid API Key provided' } }));
      return;
    }
    const held = this.#held.get(`${method} ${url.pathname}`);
    if (held) {
      this.#held.delete(`${method} ${url.pathname}`);
      held.reached();
      await held.answer;
    }
    const failing = this.#failing.get(`${method} ${url.pathname}`);
    if (failing) {
      send(failing.status, JSON.stringify({ error: { type: failing.type, code: failing.code, message: 'Refused by a test outage' } }));
      return;
    }
    const idemKey = method === 'POST' ? req.headers['idempotency-key'] : undefined;
    const cacheKey = typeof idemKey === 'string' ? `${url.pathname}:${idemKey}` : undefined;
    if (cacheKey && this.#idempotent.has(cacheKey)) {
      const cached = this.#idempotent.get(cacheKey)!;
      send(cached.status, cached.body);
      return;
    }
    let status = 200;
    let text: string;
    try {
      text = JSON.stringify(this.#route(method, url.pathname, body as Json));
    } catch (err) {
      if (!(err instanceof StripeApiError)) throw err;
      status = err.status;
      text = JSON.stringify({ error: { type: err.type, code: err.code, message: err.message, ...(err.param ? { param: err.param } : {}) } });
    }
    if (cacheKey) this.#idempotent.set(cacheKey, { status, body: text });
    send(status, text);
  }

  #route(method: string, path: string, body: Json): Json {
    const parts = path.replace(/^\/v1\//, '').split('/');
    const [resource, id, action] = parts;
    const key = `${method} ${resource}${id ? '/:id' : ''}${action ? `/${action}` : ''}`;
    switch (key) {
      case 'POST customers':
        return this.#createCustomer({ email: body.email ?? null, name: body.name ?? null, metadata: body.metadata ?? {} });
      case 'GET customers/:id':
        return this.#get(this.customers, id!, 'customer');
      case 'POST products': {
        const product = productObject({ id: this.#id('prod'), name: body.name, metadata: body.metadata ?? {}, created: this.now() });
        this.products.set(product.id, product);
        return product;
      }
      case 'POST products/:id':
        return this.#update(this.#get(this.products, id!, 'product'), body);
      case 'GET products/:id':
        return this.#get(this.products, id!, 'product');
      case 'POST prices':
        return this.#createPrice(body);
      case 'POST prices/:id':
        return this.#update(this.#get(this.prices, id!, 'price'), body);
      case 'GET prices/:id':
        return this.#get(this.prices, id!, 'price');
      case 'GET subscriptions/:id':
        return this.#subscriptionView(this.#get(this.subscriptions, id!, 'subscription'), body.expand);
      case 'POST subscriptions/:id':
        return this.#updateSubscription(id!, body);
      case 'DELETE subscriptions/:id': {
        const sub = this.#get(this.subscriptions, id!, 'subscription');
        if (sub.status === 'canceled') throw new StripeApiError(400, 'This subscription is already canceled', 'resource_missing');
        this.#cancelNow(sub);
        return this.#subscriptionView(sub);
      }
      case 'POST subscription_schedules':
        return this.#createSchedule(body);
      case 'GET subscription_schedules/:id':
        return this.#get(this.schedules, id!, 'subscription_schedule');
      case 'POST subscription_schedules/:id':
        return this.#updateSchedule(id!, body);
      case 'POST subscription_schedules/:id/release':
        return this.#releaseSchedule(id!);
      case 'GET invoices/:id':
        return this.#get(this.invoices, id!, 'invoice');
      case 'POST invoices/:id/void':
        return this.#voidInvoice(id!);
      case 'GET invoice_payments': {
        const data = [...this.invoicePayments.values()].filter(
          (p) =>
            (!body.invoice || p.invoice === body.invoice) &&
            (!body.payment?.payment_intent || p.payment.payment_intent === body.payment.payment_intent),
        );
        return { object: 'list', data, has_more: false, url: '/v1/invoice_payments' };
      }
      case 'POST refunds':
        return this.#refund(body);
      case 'GET invoices': {
        const data = [...this.invoices.values()].filter(
          (i) =>
            (!body.subscription || i.parent?.subscription_details?.subscription === body.subscription) && (!body.status || i.status === body.status),
        );
        return { object: 'list', data, has_more: false, url: '/v1/invoices' };
      }
      default:
        break;
    }
    if (resource === 'checkout' && id === 'sessions') {
      const sessionId = action;
      if (method === 'POST' && !sessionId) return this.#createCheckoutSession(body);
      if (method === 'GET' && sessionId) return this.#sessionView(this.#get(this.sessions, sessionId, 'checkout.session'));
    }
    if (resource === 'billing_portal' && id === 'sessions' && method === 'POST' && !action) return this.#createPortalSession(body);
    if (resource === 'billing_portal' && id === 'configurations') return this.#portalConfigurations(method, action, body);
    throw new StripeApiError(404, `Unrecognized request URL (${method}: ${path})`, 'unrecognized_url');
  }

  /** A full refund of a payment intent's payment (the only kind the marketplace makes). */
  #refund(body: Json): Json {
    const payment = [...this.invoicePayments.values()].find((p) => p.payment.payment_intent === body.payment_intent);
    if (!payment) throw new StripeApiError(404, `No such payment_intent: '${body.payment_intent}'`);
    if ([...this.refunds.values()].some((r) => r.payment_intent === body.payment_intent)) {
      throw new StripeApiError(400, `Charge for payment intent ${body.payment_intent} has already been refunded.`, 'charge_already_refunded');
    }
    const refund = refundObject({
      id: this.#id('re'),
      created: this.now(),
      amount: payment.amount_paid,
      currency: payment.currency,
      payment_intent: body.payment_intent,
      reason: body.reason ?? null,
      metadata: body.metadata ?? {},
    });
    this.refunds.set(refund.id, refund);
    return refund;
  }

  /**
   * The object, or Stripe's "No such ...": 404 for the object of the path; 400 naming the parameter (`param`) for an
   * object a create names, as Stripe answers a checkout session for a deleted customer.
   */
  #get(map: Map<string, Json>, id: string, what: string, param?: string): Json {
    const found = map.get(id);
    if (!found) throw new StripeApiError(param ? 400 : 404, `No such ${what}: '${id}'`, 'resource_missing', 'invalid_request_error', param);
    return found;
  }

  #update(object: Json, body: Json): Json {
    if (body.active !== undefined) object.active = body.active === 'true';
    if (body.metadata) object.metadata = { ...object.metadata, ...body.metadata };
    if (body.name) object.name = body.name;
    if (object.object === 'product') object.updated = this.now();
    return object;
  }

  #createCustomer(fields: { email: string | null; name: string | null; metadata: Json }): Json {
    const customer = customerObject({ id: this.#id('cus'), created: this.now(), ...fields });
    this.customers.set(customer.id, customer);
    this.#emit('customer.created', customer);
    return customer;
  }

  #createPrice(body: Json): Json {
    this.#get(this.products, body.product, 'product');
    if (!body.recurring?.interval) throw new StripeApiError(400, 'Missing required param: recurring[interval].', 'parameter_missing');
    const price = priceObject({
      id: this.#id('price'),
      product: body.product,
      unit_amount: Number(body.unit_amount),
      currency: body.currency,
      interval: body.recurring.interval,
      metadata: body.metadata ?? {},
      created: this.now(),
    });
    this.prices.set(price.id, price);
    return price;
  }

  #createCheckoutSession(body: Json): Json {
    if (body.mode !== 'subscription') throw new StripeApiError(400, 'This fake only supports mode=subscription', 'parameter_invalid');
    const lineItems = body.line_items as Json[] | undefined;
    if (!lineItems?.length) throw new StripeApiError(400, 'Missing required param: line_items.', 'parameter_missing');
    const price = this.#get(this.prices, lineItems[0]!.price, 'price');
    if (!price.active) throw new StripeApiError(400, 'The price specified is inactive.', 'price_inactive');
    if (body.customer) this.#get(this.customers, body.customer, 'customer', 'customer');
    const id = this.#id('cs_test');
    const session = checkoutSessionObject({
      id,
      currency: price.currency,
      amount: price.unit_amount * Number(lineItems[0]!.quantity ?? 1),
      mode: 'subscription',
      status: 'open',
      payment_status: 'unpaid',
      url: `${this.url}/pay/${id}`,
      customer: body.customer ?? null,
      customer_email: body.customer_email ?? null,
      customer_details: null,
      client_reference_id: body.client_reference_id ?? null,
      metadata: body.metadata ?? {},
      subscription: null,
      success_url: body.success_url ?? null,
      cancel_url: body.cancel_url ?? null,
      created: this.now(),
      expires_at: this.now() + DAY,
      _line_items: lineItems.map((l) => ({ price: l.price, quantity: Number(l.quantity ?? 1) })),
      _subscription_metadata: body.subscription_data?.metadata ?? {},
    });
    this.sessions.set(id, session);
    return this.#sessionView(session);
  }

  #sessionView(session: Json): Json {
    const { _line_items, _subscription_metadata, ...view } = session;
    return structuredClone(view);
  }

  #createSubscription(customerId: string, price: Json, metadata: Json): Json {
    const start = this.now();
    const id = this.#id('sub');
    const sub = subscriptionObject({
      id,
      customer: customerId,
      status: 'active',
      created: start,
      start_date: start,
      cancel_at_period_end: false,
      cancel_at: null,
      canceled_at: null,
      ended_at: null,
      metadata: { ...metadata },
      pending_update: null,
      schedule: null,
      latest_invoice: null,
      currency: price.currency,
      items: [
        subscriptionItemObject({
          id: this.#id('si'),
          created: start,
          subscription: id,
          price: structuredClone(price),
          current_period_start: start,
          current_period_end: addInterval(start, price.recurring.interval),
        }),
      ],
    });
    this.subscriptions.set(sub.id, sub);
    return sub;
  }

  #subscriptionView(sub: Json, expand?: unknown): Json {
    const view = structuredClone(sub);
    const fields = Array.isArray(expand) ? expand : [];
    if (fields.includes('schedule') && sub.schedule) view.schedule = structuredClone(this.schedules.get(sub.schedule));
    if (fields.includes('latest_invoice') && sub.latest_invoice) view.latest_invoice = structuredClone(this.invoices.get(sub.latest_invoice));
    return view;
  }

  #createInvoice(sub: Json, amount: number, reason: string): Json {
    const item = sub.items.data[0];
    const invoice = invoiceObject({
      id: this.#id('in'),
      customer: this.customers.get(sub.customer)!,
      subscription: sub,
      status: 'open',
      amount_due: amount,
      amount_paid: 0,
      currency: sub.currency,
      attempt_count: 0,
      billing_reason: reason,
      created: this.now(),
      period_start: item.current_period_start,
      period_end: item.current_period_end,
    });
    this.invoices.set(invoice.id, invoice);
    return invoice;
  }

  #markPaid(invoice: Json): void {
    if (invoice.amount_due > 0) {
      const payment = invoicePaymentObject({
        id: this.#id('inpay'),
        created: this.now(),
        invoice: invoice.id,
        amount: invoice.amount_due,
        currency: invoice.currency,
        payment_intent: this.#id('pi'),
      });
      this.invoicePayments.set(invoice.id, payment);
    }
    invoice.status = 'paid';
    invoice.amount_paid = invoice.amount_due;
    invoice.amount_remaining = 0;
    invoice.attempt_count += 1;
    invoice.attempted = true;
    invoice.status_transitions.paid_at = this.now();
  }

  #updateSubscription(id: string, body: Json): Json {
    const sub = this.#get(this.subscriptions, id, 'subscription');
    if (sub.status === 'canceled') throw new StripeApiError(400, 'A canceled subscription can only update its cancellation_details and metadata.', 'resource_missing');
    if (body.cancel_at_period_end !== undefined) {
      if (sub.schedule) {
        throw new StripeApiError(
          400,
          `The subscription is managed by the subscription schedule \`${sub.schedule}\`, and updating any cancelation behavior directly is not allowed.`,
          'parameter_invalid',
        );
      }
      sub.cancel_at_period_end = body.cancel_at_period_end === 'true';
      sub.cancel_at = sub.cancel_at_period_end ? sub.items.data[0].current_period_end : null;
    }
    if (body.metadata) sub.metadata = { ...sub.metadata, ...body.metadata };
    const items = body.items as Json[] | undefined;
    if (items?.length) {
      const change = items[0]!;
      const item = sub.items.data[0];
      if (change.id && change.id !== item.id) throw new StripeApiError(400, `No such subscription item: '${change.id}'`);
      const price = this.#get(this.prices, change.price, 'price');
      const pendingIfIncomplete = body.payment_behavior === 'pending_if_incomplete';
      if (pendingIfIncomplete && sub.pending_update) {
        throw new StripeApiError(400, 'This subscription already has a pending update.', 'subscription_pending_update');
      }
      if (body.proration_behavior === 'always_invoice') {
        const proration = Math.max(0, price.unit_amount - item.price.unit_amount);
        const invoice = this.#createInvoice(sub, proration, 'subscription_update');
        sub.latest_invoice = invoice.id;
        this.#emit('invoice.created', invoice);
        if (this.#paymentMode === 'succeeds') {
          this.#markPaid(invoice);
          setItemPrice(item, price);
          this.#emit('invoice.paid', invoice);
          this.#emit('invoice.payment_succeeded', invoice);
        } else if (pendingIfIncomplete) {
          sub.pending_update = {
            billing_cycle_anchor: null,
            cancel_at_period_end: null,
            discount: null,
            discounts: null,
            expires_at: this.now() + DAY - 3600,
            metadata: null,
            subscription_items: [pendingItem(item, price)],
            trial_end: null,
            trial_from_plan: null,
          };
          if (this.#paymentMode === 'fails') this.#emit('invoice.payment_failed', invoice);
        } else {
          setItemPrice(item, price);
          sub.status = 'past_due';
          this.#emit('invoice.payment_failed', invoice);
        }
      } else {
        setItemPrice(item, price);
      }
    }
    this.#emit('customer.subscription.updated', sub);
    return this.#subscriptionView(sub);
  }

  #cancelNow(sub: Json): void {
    sub.status = 'canceled';
    sub.canceled_at = this.now();
    sub.ended_at = this.now();
    sub.pending_update = null;
    if (sub.schedule) {
      const schedule = this.schedules.get(sub.schedule)!;
      schedule.status = 'canceled';
      schedule.canceled_at = this.now();
      sub.schedule = null;
      this.#emit('subscription_schedule.canceled', schedule);
    }
    this.#emit('customer.subscription.deleted', sub);
  }

  #createSchedule(body: Json): Json {
    const sub = this.#get(this.subscriptions, body.from_subscription, 'subscription');
    if (sub.schedule) throw new StripeApiError(400, `The subscription \`${sub.id}\` is already attached to a schedule.`, 'resource_already_exists');
    const item = sub.items.data[0];
    const schedule = subscriptionScheduleObject({
      id: this.#id('sub_sched'),
      customer: sub.customer,
      subscription: sub.id,
      status: 'active',
      end_behavior: 'release',
      released_at: null,
      released_subscription: null,
      canceled_at: null,
      current_phase: { start_date: item.current_period_start, end_date: item.current_period_end },
      phases: [
        schedulePhaseObject({ start_date: item.current_period_start, end_date: item.current_period_end, price: item.price.id, quantity: 1, currency: sub.currency }),
      ],
      metadata: {},
      created: this.now(),
    });
    this.schedules.set(schedule.id, schedule);
    sub.schedule = schedule.id;
    this.#emit('subscription_schedule.created', schedule);
    this.#emit('customer.subscription.updated', sub);
    return schedule;
  }

  #updateSchedule(id: string, body: Json): Json {
    const schedule = this.#get(this.schedules, id, 'subscription_schedule');
    if (schedule.status !== 'active') throw new StripeApiError(400, `You cannot update a schedule that is ${schedule.status}.`, 'parameter_invalid');
    if (body.end_behavior) schedule.end_behavior = body.end_behavior;
    if (Array.isArray(body.phases)) {
      let cursor: number = schedule.phases[0].start_date;
      schedule.phases = body.phases.map((p: Json) => {
        const price = this.#get(this.prices, p.items?.[0]?.price, 'price');
        const start = p.start_date && p.start_date !== 'now' ? Number(p.start_date) : cursor;
        const end = p.end_date ? Number(p.end_date) : addInterval(start, p.duration?.interval ?? price.recurring.interval, Number(p.duration?.interval_count ?? 1));
        cursor = end;
        return schedulePhaseObject({ start_date: start, end_date: end, price: price.id, quantity: Number(p.items[0].quantity ?? 1), currency: price.currency });
      });
    }
    this.#emit('subscription_schedule.updated', schedule);
    return schedule;
  }

  #releaseSchedule(id: string): Json {
    const schedule = this.#get(this.schedules, id, 'subscription_schedule');
    if (schedule.status !== 'active') throw new StripeApiError(400, `You cannot release a schedule that is ${schedule.status}.`, 'parameter_invalid');
    const sub = this.subscriptions.get(schedule.subscription);
    schedule.status = 'released';
    schedule.released_at = this.now();
    schedule.released_subscription = schedule.subscription;
    schedule.subscription = null;
    schedule.current_phase = null;
    this.#emit('subscription_schedule.released', schedule);
    if (sub) {
      sub.schedule = null;
      this.#emit('customer.subscription.updated', sub);
    }
    return schedule;
  }

  #voidInvoice(id: string): Json {
    const invoice = this.#get(this.invoices, id, 'invoice');
    if (invoice.status !== 'open') throw new StripeApiError(400, `You can only pass in open invoices. This invoice isn't open.`, 'invoice_not_open');
    invoice.status = 'void';
    invoice.status_transitions.voided_at = this.now();
    this.#emit('invoice.voided', invoice);
    const sub = this.subscriptions.get(invoice.parent?.subscription_details?.subscription);
    if (sub?.pending_update && sub.latest_invoice === invoice.id) {
      // Voiding the invoice of a pending update discards the update.
      sub.pending_update = null;
      this.#emit('customer.subscription.pending_update_expired', sub);
      this.#emit('customer.subscription.updated', sub);
    }
    return invoice;
  }

  /** Create, list (`active`, `is_default`), read and update (`active`, `features`, `metadata`) portal configurations. */
  #portalConfigurations(method: string, id: string | undefined, body: Json): Json {
    if (method === 'POST' && !id) {
      if (!body.features) throw new StripeApiError(400, 'Missing required param: features.', 'parameter_missing', 'invalid_request_error', 'features');
      const made = portalConfigurationObject({ id: this.#id('bpc'), created: this.now(), is_default: false, features: body.features, metadata: body.metadata });
      this.portalConfigurations.set(made.id, made);
      return made;
    }
    if (method === 'GET' && !id) {
      const data = [...this.portalConfigurations.values()].filter(
        (c) => (body.active === undefined || c.active === (body.active === 'true')) && (body.is_default === undefined || c.is_default === (body.is_default === 'true')),
      );
      return { object: 'list', data, has_more: false, url: '/v1/billing_portal/configurations' };
    }
    const configuration = this.#get(this.portalConfigurations, id!, 'configuration');
    if (method === 'GET') return configuration;
    if (body.features) {
      const features = portalConfigurationObject({ id: configuration.id, created: configuration.created, is_default: configuration.is_default, metadata: {}, features: body.features }).features;
      for (const [name, feature] of Object.entries(body.features as Json)) configuration.features[name] = { ...configuration.features[name], ...pick(features[name], Object.keys(feature)) };
    }
    configuration.updated = this.now();
    return this.#update(configuration, body);
  }

  #createPortalSession(body: Json): Json {
    this.#get(this.customers, body.customer, 'customer', 'customer');
    const configuration = this.#get(this.portalConfigurations, body.configuration ?? 'bpc_fake_default', 'configuration', 'configuration');
    if (!configuration.active) throw new StripeApiError(400, 'The configuration is not active.', 'parameter_invalid', 'invalid_request_error', 'configuration');
    const flow = body.flow_data;
    if (flow?.type === 'subscription_cancel') {
      const sub = this.#get(this.subscriptions, flow.subscription_cancel?.subscription, 'subscription');
      if (sub.customer !== body.customer) throw new StripeApiError(400, 'The subscription does not belong to this customer.', 'parameter_invalid');
      if (!configuration.features.subscription_cancel.enabled) {
        throw new StripeApiError(400, 'This flow cannot be used: the configuration does not allow subscription cancellation.', 'parameter_invalid');
      }
    }
    const id = this.#id('bps');
    const session = portalSessionObject({
      id,
      customer: body.customer,
      return_url: body.return_url ?? null,
      url: `${this.url}/portal/${id}`,
      configuration: configuration.id,
      flow: flow ? portalFlow(flow) : null,
      created: this.now(),
    });
    this.portalSessions.set(id, session);
    return session;
  }
}

function pick(object: Json, keys: string[]): Json {
  return Object.fromEntries(keys.filter((k) => k in object).map((k) => [k, object[k]]));
}

/** The item a pending update would put in place: the current item with the new price. */
function pendingItem(item: Json, price: Json): Json {
  const next = structuredClone(item);
  setItemPrice(next, price);
  return next;
}

/** `flow` of a portal session, as Stripe echoes the requested flow_data back. */
function portalFlow(flow: Json): Json {
  return {
    after_completion: { hosted_confirmation: null, redirect: null, type: 'portal_homepage' },
    customer_update: null,
    subscription_cancel: flow.subscription_cancel ? { retention: null, subscription: flow.subscription_cancel.subscription } : null,
    subscription_pause: null,
    subscription_update: null,
    subscription_update_confirm: null,
    type: flow.type,
  };
}

function addInterval(unixSeconds: number, interval: string, count = 1): number {
  const d = new Date(unixSeconds * 1000);
  if (interval === 'year') d.setUTCFullYear(d.getUTCFullYear() + count);
  else if (interval === 'month') d.setUTCMonth(d.getUTCMonth() + count);
  else if (interval === 'week') d.setUTCDate(d.getUTCDate() + 7 * count);
  else d.setUTCDate(d.getUTCDate() + count);
  return Math.floor(d.getTime() / 1000);
}

export async function startStripeFake(): Promise<StripeFake> {
  return new StripeFake().start();
}
