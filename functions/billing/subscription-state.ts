import type Stripe from 'stripe';
import type { BillingDeps } from './billing-deps.ts';
import { first, sql, type Db } from '../platform/db.ts';
import { placeAnonymousPurchase } from './buyer-accounts.ts';
import { purchaseGone } from './purchase-claims.ts';
import { refundAndCancel, undoDuplicatePurchase } from './duplicate-purchases.ts';
import { grantsAccess } from './subscriptions.ts';
import { callStripe, isStripeMissing, requirePayments } from './payments.ts';

/**
 * The one writer of a paid subscription's local state. Whatever triggered it (a webhook event, the success page
 * of an anonymous checkout, an admin's tier change), the caller names a Stripe subscription; this module reads
 * it from Stripe as it is now and hands the whole state to one SQL function (billing_apply_stripe_subscription)
 * that writes it in one transaction. Because the input is always Stripe's state as read and every field is
 * overwritten, deliveries in any order and duplicates end in the same row; concurrent writers too, since each read
 * is numbered before it is made and an older read is never applied over a newer one (migration
 * 20261126000100_stripe_read_order.sql: outcome 'superseded').
 */

export type LocalStatus = 'active' | 'past_due' | 'canceled' | 'incomplete';

/**
 * 'deferred': Stripe's subscription is not paid yet (incomplete) and the user's live free subscription to the agent
 * stays as it is until it is (migration 20261126000500).
 */
export type ApplyOutcome = 'created' | 'updated' | 'superseded' | 'duplicate' | 'recorded' | 'deferred' | 'unknown_price' | 'conflict';

/** Stripe's subscription statuses in the marketplace's four (active and past_due grant access). */
export function localStatus(status: Stripe.Subscription.Status): LocalStatus {
  switch (status) {
    case 'active':
    case 'trialing':
      return 'active';
    case 'past_due':
      // access while Stripe retries the payment (of the current period only: stateOf, `lapsed`)
      return 'past_due';
    case 'canceled':
    case 'incomplete_expired':
      return 'canceled';
    default:
      // incomplete (first payment not made), paused (no payment method after a trial) and unpaid (every retry failed
      // and the account leaves the subscription open): no access until it is paid, when Stripe makes it active again.
      return 'incomplete';
  }
}

export interface StripeSubscriptionState {
  stripeSubscriptionId: string;
  stripeCustomerId: string;
  priceId: string;
  status: LocalStatus;
  periodStart: Date;
  periodEnd: Date;
  cancelAtPeriodEnd: boolean;
  canceledAt: Date | null;
  pendingPriceId: string | null;
  pendingKind: 'upgrade' | 'downgrade' | null;
  pendingInvoiceId: string | null;
  scheduleId: string | null;
}

/**
 * Whether Stripe ends the subscription when its current period ends, however it records that: `cancel_at_period_end`
 * (classic billing mode, and our own cancels), or `cancel_at` at or before the period's end, which is how Stripe's
 * flexible billing mode (the default for the subscriptions Checkout makes since API version 2025-09-30) records the
 * customer portal's "cancel at period end" and a Dashboard cancel on that date. Review 76: read from
 * `cancel_at_period_end` alone, a portal cancel showed as renewing, the portal link offered to cancel it again, and a
 * deleted agent's round took it over as its own, so the agent's restore renewed what its user had canceled.
 */
export function endsWithItsPeriod(sub: Stripe.Subscription): boolean {
  const periodEnd = sub.items.data[0]?.current_period_end;
  return sub.cancel_at_period_end || (sub.cancel_at != null && periodEnd !== undefined && sub.cancel_at <= periodEnd);
}

/** The id of a Stripe reference, expanded or not. */
export const idOf = (v: string | { id: string } | null | undefined) => (v == null ? null : typeof v === 'string' ? v : v.id);
const fromUnix = (s: number) => new Date(s * 1000);

/**
 * What the local row should say, read off the subscription (with its schedule expanded). Pending changes come
 * from Stripe too: an upgrade waiting for payment is the subscription's `pending_update`; a downgrade is a
 * future phase of its schedule with another price. `lapsed`: a subscription whose renewal is unpaid where that ends
 * access (lapsedUnpaid: an earlier period's, or the current one's written off) grants no access, as `incomplete`.
 */
export function stateOf({ subscription: sub, lapsed }: Pick<StripeRead, 'subscription' | 'lapsed'>): StripeSubscriptionState {
  const item = sub.items.data[0];
  if (!item) throw new Error(`Stripe subscription ${sub.id} has no items`);
  const priceId = item.price.id;
  let pendingPriceId: string | null = null;
  let pendingKind: 'upgrade' | 'downgrade' | null = null;
  let pendingInvoiceId: string | null = null;
  const pendingItem = sub.pending_update?.subscription_items?.[0];
  if (pendingItem && pendingItem.price.id !== priceId) {
    pendingPriceId = pendingItem.price.id;
    pendingKind = 'upgrade';
    pendingInvoiceId = idOf(sub.latest_invoice as string | { id: string } | null);
  }
  const schedule = typeof sub.schedule === 'object' ? sub.schedule : null;
  if (!pendingKind && schedule && schedule.status === 'active') {
    const next = schedule.phases.find((p) => p.start_date >= item.current_period_end);
    const nextPrice = idOf(next?.items[0]?.price as string | { id: string } | undefined);
    if (nextPrice && nextPrice !== priceId) {
      pendingPriceId = nextPrice;
      pendingKind = 'downgrade';
    }
  }
  // Stripe bills price x quantity. A portal whose configuration allows quantity changes lets the subscriber set 0
  // (then nothing is charged): no access, as for an unpaid subscription, until it is 1 or more again (found by a
  // review). More than 1 pays more for the same access; that is the customer's own choice and changes nothing here.
  const paidFor = (item.quantity ?? 1) >= 1;
  const status = (!paidFor || lapsed) && localStatus(sub.status) !== 'canceled' ? 'incomplete' : localStatus(sub.status);
  return {
    stripeSubscriptionId: sub.id,
    stripeCustomerId: idOf(sub.customer as string | { id: string })!,
    priceId,
    status,
    periodStart: fromUnix(item.current_period_start),
    periodEnd: fromUnix(item.current_period_end),
    cancelAtPeriodEnd: status !== 'canceled' && endsWithItsPeriod(sub),
    canceledAt: status === 'canceled' && (sub.ended_at ?? sub.canceled_at) ? fromUnix((sub.ended_at ?? sub.canceled_at)!) : null,
    pendingPriceId,
    pendingKind,
    pendingInvoiceId,
    scheduleId: idOf(sub.schedule as string | { id: string } | null),
  };
}

/** A read of a Stripe subscription to apply, with its number: taken from public.stripe_reads before the read was made. */
export interface StripeRead {
  subscription: Stripe.Subscription;
  read: number;
  /** a period's renewal unpaid where that ends access (lapsedUnpaid) */
  lapsed: boolean;
}

/** Reads a subscription from Stripe to apply it (applyStripeState): numbered first, so an older read never wins. */
export async function readToApply(deps: BillingDeps, stripeSubscriptionId: string): Promise<StripeRead> {
  const numbered = await first<{ read: number }>(deps.database.db, sql`select nextval('public.stripe_reads') as read`);
  const subscription = await readStripeSubscription(deps, stripeSubscriptionId);
  return { subscription, read: numbered!.read, lapsed: await lapsedUnpaid(deps, subscription) };
}

/**
 * Whether a past_due subscription went into a new period with an earlier period's renewal still unpaid. past_due
 * grants access while Stripe retries a failed payment (docs/security.md rule 15), and Stripe retries a renewal
 * within its period. When every retry failed, Stripe's "Manage failed payments" setting cancels the subscription,
 * marks it unpaid (both end access here) or leaves it past_due: then Stripe opens a new invoice each period, moves
 * the period on, and the subscription stayed past_due, served with a fresh rolling quota every period, for good,
 * with nothing paid (found by a review). So past_due grants access in the period whose renewal failed and no longer
 * once another period began with that renewal still unpaid: the row then shows `incomplete`, and paying the open
 * invoices (the portal shows them) makes Stripe's state active again, which the next event writes. Only renewal
 * invoices count (billing_reason subscription_cycle): an open upgrade proration never made a subscription past_due.
 *
 * The same setting's other half may mark such a renewal `uncollectible` instead of leaving it open, and Stripe then
 * makes the subscription active again (nothing is left to collect): the buyer whose card always fails was served
 * every period (review 107). So an uncollectible renewal is an unpaid one: of the current period, it ends access in an
 * active subscription; of an earlier period with no renewal paid since, in a past_due one. Once a later renewal is
 * paid, a written-off one no longer holds access back (the account chose not to collect it; an open one does,
 * comingBackFromUnpaid).
 * The current period's renewal is read off the subscription (its latest invoice, expanded by readStripeSubscription);
 * past_due subscriptions, and active ones coming back from unpaid, make one or two Stripe calls more.
 */
async function lapsedUnpaid(deps: BillingDeps, sub: Stripe.Subscription): Promise<boolean> {
  const periodStart = sub.items.data[0]?.current_period_start;
  if (periodStart === undefined) return false;
  // A day's margin: the current period's own renewal invoice is made at its start (never a day before it), and
  // tiers renew monthly or yearly, so an earlier period's renewal is weeks older.
  const earlierPeriod = periodStart - 24 * 60 * 60;
  const renewal = (invoice: Stripe.Invoice) => invoice.billing_reason === 'subscription_cycle';
  const latest = typeof sub.latest_invoice === 'object' ? sub.latest_invoice : null;
  if ((sub.status === 'active' || sub.status === 'trialing') && latest && renewal(latest) && latest.status === 'uncollectible' && latest.created >= earlierPeriod) {
    return true;
  }
  const pastDue = sub.status === 'past_due';
  if (!pastDue && !(await comingBackFromUnpaid(deps, sub))) return false;
  const { stripe } = requirePayments(deps);
  const earlierRenewals = async (status: 'open' | 'uncollectible' | 'paid') =>
    (await callStripe(() => stripe.invoices.list({ subscription: sub.id, status, limit: 100 }))).data.filter(
      (invoice) => renewal(invoice) && invoice.created < earlierPeriod,
    );
  if ((await earlierRenewals('open')).length > 0) return true;
  if (!pastDue) return false;
  // A written-off renewal ends the grace of a later failure only when no renewal was paid since: a buyer whose card
  // failed once, long ago, and who paid every period after keeps the retry period (review 111).
  const writtenOff = await earlierRenewals('uncollectible');
  if (writtenOff.length === 0) return false;
  const lastPaid = Math.max(0, ...(await earlierRenewals('paid')).map((invoice) => invoice.created));
  return writtenOff.some((invoice) => invoice.created > lastPaid);
}

/**
 * An active subscription whose row here is past_due or incomplete: Stripe's status follows the latest invoice only, so
 * paying the newest one (or the card working again at the next renewal) made it active with an earlier period's
 * renewal still open, and access came back: the buyer paid every other period and was served every period (review
 * 30). So the open renewals are looked at then too: one more Stripe call, only on the way back from unpaid.
 */
async function comingBackFromUnpaid(deps: BillingDeps, sub: Stripe.Subscription): Promise<boolean> {
  if (sub.status !== 'active' && sub.status !== 'trialing') return false;
  return !!(await first(
    deps.database.db,
    sql`select 1 as behind from public.subscriptions where stripe_subscription_id = ${sub.id} and status in ('past_due', 'incomplete')`,
  ));
}

/**
 * readToApply for a purchase someone is adding to an account (a claim link, the success page): one Stripe no longer
 * has answers 422 INVALID_STATE `gone` (it answered 500 on every use of the link), before anything is made or used up.
 */
export async function readPurchaseToPlace(deps: BillingDeps, stripeSubscriptionId: string): Promise<StripeRead> {
  try {
    return await readToApply(deps, stripeSubscriptionId);
  } catch (err) {
    if (isStripeMissing(err)) throw purchaseGone();
    throw err;
  }
}

/** Reads a subscription from Stripe with what the local state needs. */
export async function readStripeSubscription(deps: Pick<BillingDeps, 'payments'>, stripeSubscriptionId: string): Promise<Stripe.Subscription> {
  const { stripe } = requirePayments(deps);
  return callStripe(() => stripe.subscriptions.retrieve(stripeSubscriptionId, { expand: ['schedule', 'latest_invoice'] }));
}

/**
 * Who a Stripe subscription belongs to. `removed`: the marketplace user it names no longer exists (an admin removed
 * them; the removal cancels their subscriptions, user-removal.ts), so nobody can be served by it.
 */
export interface Subscriber {
  userId: string;
  removed: boolean;
}

/**
 * The marketplace user a Stripe subscription belongs to: the user our checkout put in its metadata, else the user
 * its local row was written for, else the user the Stripe customer belongs to, else (anonymous checkout) whoever
 * placeAnonymousPurchase gives it to: the claimant of a used claim, a new account, or a verified one. Undefined for
 * subscriptions the marketplace did not start, and while a claim is pending (an unverified account holds the
 * buyer's address): the subscription then has no local row until the claim link is used.
 *
 * A named user who no longer exists is `removed` when this deployment made the subscription's Stripe customer for
 * them (the customer link outlives the user); writing a row for them failed on the foreign key, every event about the
 * subscription answered 500 and Stripe went on charging (found by a review). A user this deployment never had (a
 * subscription of another deployment on the same Stripe account) is nobody's: recorded, never touched. A removal
 * landing between this read and the write fails the write on the foreign key (5xx, nothing recorded): Stripe's
 * redelivery then finds the user removed.
 */
export async function subscriberOf(deps: BillingDeps, sub: Stripe.Subscription): Promise<Subscriber | undefined> {
  const named = await namedSubscriber(deps, sub);
  if (named !== undefined) return named ?? undefined;
  if (sub.metadata?.anonymous !== 'true') return undefined;
  // An anonymous purchase is placed once it is paid (or in Stripe's retries of a later payment), never before: no
  // account is made, no claim link mailed and no row written on a verified holder's account for a purchase nobody
  // paid for. Stripe's next event after the payment places it. Before, an unpaid (`incomplete`) purchase typed with
  // a verified stranger's address sat on their account and blocked every purchase of that agent by them for a day,
  // and one typed with any address made an account or mailed a claim link, for free and without end (found by a
  // review). An ended one is placed with nobody too (the cancellation of a removed user's purchase would otherwise
  // make them a new account).
  if (!grantsAccess(localStatus(sub.status))) return undefined;
  const customerId = idOf(sub.customer as string | { id: string })!;
  const { stripe } = requirePayments(deps);
  const customer = await callStripe(() => stripe.customers.retrieve(customerId));
  const email = 'deleted' in customer && customer.deleted ? undefined : (customer as Stripe.Customer).email;
  if (!email) return undefined;
  const placement = await placeAnonymousPurchase(
    deps,
    {
      email,
      name: (customer as Stripe.Customer).name ?? undefined,
      stripeCustomerId: customerId,
      stripeSubscriptionId: sub.id,
      agentId: sub.metadata?.agentId,
      tierId: sub.metadata?.tierId,
    },
    // A webhook never renews an expired claim link: only the buyer's own return to the success page does.
    { renewExpiredClaim: false },
  );
  return placement.kind === 'attached' ? { userId: placement.buyer.userId, removed: false } : undefined;
}

/**
 * The user a Stripe subscription names (subscriberOf's first step, which the anonymous success page asks too): our
 * checkout's metadata, the subscription's row, or its Stripe customer's link. Null when the named user is one this
 * deployment never had (another deployment's); undefined when it names nobody (an anonymous purchase not placed yet).
 */
export async function namedSubscriber(deps: BillingDeps, sub: Stripe.Subscription): Promise<Subscriber | null | undefined> {
  const customerId = idOf(sub.customer as string | { id: string })!;
  const named = await first<{ userId: string; present: boolean; ours: boolean }>(
    deps.database.db,
    sql`with named as (
          select coalesce(${sub.metadata?.userId || null}::text,
                          (select s.user_id from public.subscriptions s where s.stripe_subscription_id = ${sub.id}),
                          (select c.user_id from public.billing_customers c where c.stripe_customer_id = ${customerId})) as user_id
        )
        select n.user_id as "userId",
               exists (select 1 from "user" u where u.id = n.user_id) as present,
               exists (select 1 from public.billing_customers c where c.user_id = n.user_id and c.stripe_customer_id = ${customerId}) as ours
          from named n where n.user_id is not null`,
  );
  if (!named) return undefined;
  if (named.present) return { userId: named.userId, removed: false };
  return named.ours ? { userId: named.userId, removed: true } : null;
}

/** Stripe has not ended it: it can still charge. */
const isLive = (sub: Stripe.Subscription) => localStatus(sub.status) !== 'canceled';

export interface ApplyResult {
  outcome: ApplyOutcome;
  subscriptionId: string | null;
}

/** Writes Stripe's state of one subscription (and records the event id, when there is one) in one transaction. */
export async function applyStripeState(
  deps: BillingDeps,
  input: { event?: { id: string; type: string }; state?: StripeSubscriptionState; read?: number; userId?: string | undefined },
): Promise<ApplyResult> {
  const s = input.state;
  const row = await first<{ outcome: ApplyOutcome; subscriptionId: string | null }>(
    deps.database.db,
    // Named arguments: sixteen positional ones, several of the same type, would swap silently.
    sql`select outcome, subscription_id as "subscriptionId" from public.billing_apply_stripe_subscription(
          p_event_id => ${input.event?.id ?? null}::text,
          p_event_type => ${input.event?.type ?? null}::text,
          p_stripe_subscription_id => ${s?.stripeSubscriptionId ?? null}::text,
          p_stripe_customer_id => ${s?.stripeCustomerId ?? null}::text,
          p_user_id => ${input.userId ?? null}::text,
          p_price_id => ${s?.priceId ?? null}::text,
          p_status => ${s?.status ?? null}::text,
          p_period_start => ${s?.periodStart ?? null}::timestamptz,
          p_period_end => ${s?.periodEnd ?? null}::timestamptz,
          p_cancel_at_period_end => ${s?.cancelAtPeriodEnd ?? false}::boolean,
          p_canceled_at => ${s?.canceledAt ?? null}::timestamptz,
          p_pending_price_id => ${s?.pendingPriceId ?? null}::text,
          p_pending_kind => ${s?.pendingKind ?? null}::text,
          p_pending_invoice_id => ${s?.pendingInvoiceId ?? null}::text,
          p_schedule_id => ${s?.scheduleId ?? null}::text,
          p_now => ${deps.clock.now()}::timestamptz,
          p_read => ${input.read ?? null}::bigint)`,
  );
  const result = row ?? { outcome: 'recorded' as const, subscriptionId: null };
  if (result.outcome === 'unknown_price' || result.outcome === 'conflict') {
    deps.logger.warn('stripe subscription not applied', {
      outcome: result.outcome,
      stripeSubscriptionId: s?.stripeSubscriptionId,
      priceId: s?.priceId,
      eventId: input.event?.id,
    });
  }
  return result;
}

/**
 * Re-reads a Stripe subscription and writes its state: the path every writer takes (webhook events, the
 * anonymous success page, admin tier changes and cancellations).
 */
export async function syncStripeSubscription(
  deps: BillingDeps,
  stripeSubscriptionId: string,
  event?: { id: string; type: string },
): Promise<ApplyResult> {
  return applyStripeRead(deps, await readToApply(deps, stripeSubscriptionId), event);
}

/**
 * Writes a read of a Stripe subscription for whoever it belongs to now (syncStripeSubscription without the read, for a
 * caller that has just made one: the anonymous success page reads before it places the purchase). A read is numbered
 * before Stripe is asked (readToApply), and a write never goes behind a later read already written, so an older read
 * is as safe here as a fresh one.
 */
export async function applyStripeRead(deps: BillingDeps, read: StripeRead, event?: { id: string; type: string }): Promise<ApplyResult> {
  // Before the subscriber is found, which places an anonymous purchase (an account made for a purchase that is then
  // refunded); writeStripeRead asks again for the writer that comes to it directly (a claim), a no-op after an undo.
  read = await undoPurchaseOfDeletedAgent(deps, read);
  const subscriber = await subscriberOf(deps, read.subscription);
  if (subscriber?.removed) return endPurchaseOfRemovedUser(deps, read.subscription, subscriber.userId, event);
  return writeStripeRead(deps, read, subscriber?.userId, event);
}

/**
 * Writes a read of a Stripe subscription for the user it belongs to, and undoes at Stripe what the marketplace will
 * not serve: a purchase of an agent deleted before it served, a purchase of a banned user, a second paid subscription
 * to an agent the user pays for. Every writer comes here: syncStripeSubscription, and the claim of an anonymous
 * purchase (claim-purchase.ts), which reads Stripe before it uses the claim. The claim wrote the row directly before
 * and skipped the undos (found by a review); then, written here, it still skipped the deleted agent's, which ran one
 * step earlier: a purchase whose claim waited while its agent was deleted was written live and charged for a period
 * nobody could use (review 53).
 */
export async function writeStripeRead(
  deps: BillingDeps,
  stripeRead: StripeRead,
  userId: string | undefined,
  event?: { id: string; type: string },
): Promise<ApplyResult> {
  stripeRead = await undoPurchaseOfDeletedAgent(deps, stripeRead);
  const { subscription, read } = stripeRead;
  const stripeSubscriptionId = subscription.id;
  if (userId && (await newPurchaseOfBannedUser(deps, userId, subscription))) {
    // A checkout the user opened before their ban, paid after it (Stripe keeps the page payable for a day): the
    // marketplace will not serve a banned user, so the purchase is undone before it is written (found by a review).
    // A failure leaves the event unrecorded (nothing was applied), so Stripe's redelivery runs this again.
    const refunds = await refundAndCancel(deps, subscription, { metadata: { bannedUserId: userId } });
    deps.logger.warn('paid subscription of a banned user canceled and refunded', { stripeSubscriptionId, userId, refunds });
    const again = await readToApply(deps, stripeSubscriptionId);
    return applyStripeState(deps, { event, state: stateOf(again), read: again.read, userId });
  }
  const state = stateOf(stripeRead);
  const result = await applyStripeState(deps, { event, state, read, userId });
  if (result.outcome !== 'conflict' || !result.subscriptionId) return result;
  // A second paid subscription to an agent the user pays for: undone at Stripe (duplicate-purchases.ts). Until that
  // is done the event must not count as processed, so that Stripe's redelivery runs it again: the database left it
  // unrecorded (migration 20261127007400), and it is recorded here once the undo is done. (Recorded with the conflict
  // and deleted again on a failure, it stayed recorded when the failure was the database's: review 118.)
  try {
    const undone = await undoDuplicatePurchase(deps, subscription, result.subscriptionId, grantsAccess(state.status), (id) =>
      syncStripeSubscription(deps, id),
    );
    if (undone === 'kept_is_gone') {
      const again = await readToApply(deps, stripeSubscriptionId);
      return await applyStripeState(deps, { event, state: stateOf(again), read: again.read, userId });
    }
    if (event) await applyStripeState(deps, { event });
    return result;
  } catch (err) {
    // Stripe missing an object here (a payment, an invoice) is a failure to retry, not the webhook's "this event's
    // subscription is unknown, record it and move on", which would leave the duplicate charging for good.
    if (isStripeMissing(err)) throw new Error('undoing a duplicate purchase failed: Stripe could not find an object', { cause: err });
    throw err;
  }
}

/**
 * A subscription still live at Stripe whose user was removed. Removing a user cancels their written subscriptions at
 * once (user-removal.ts), so what is met here was never written for them (a checkout opened before the removal and
 * paid after it) or its cancel at the removal failed (logged then): nothing of it can be served, and which of its
 * payments were served before the removal is no longer known here, so it is refunded in full and canceled, erring
 * toward the buyer. Nothing is written (the user is gone); the event is recorded. A failure leaves the event
 * unrecorded, so Stripe's redelivery runs this again.
 */
async function endPurchaseOfRemovedUser(
  deps: BillingDeps,
  subscription: Stripe.Subscription,
  removedUserId: string,
  event: { id: string; type: string } | undefined,
): Promise<ApplyResult> {
  if (isLive(subscription)) {
    const refunds = await refundAndCancel(deps, subscription, { metadata: { removedUserId } });
    deps.logger.warn('paid subscription of a removed user canceled and refunded', {
      stripeSubscriptionId: subscription.id,
      userId: removedUserId,
      refunds,
    });
  }
  return applyStripeState(deps, { event });
}

/**
 * Whether the marketplace has served a Stripe subscription: a row of it granted access (`granted_access`, set once and
 * never cleared). The one rule that tells a purchase still to be undone in full (refunded, canceled, never written
 * live: a banned buyer's, a deleted agent's) from one that has served and ends as its ban or deletion says.
 */
export const servedBefore = (stripeSubscriptionId: string) =>
  sql<boolean>`exists (select 1 from public.subscriptions s where s.stripe_subscription_id = ${stripeSubscriptionId} and s.granted_access)`;

/**
 * A Stripe subscription the marketplace has not served yet, still live at Stripe, of a user who is banned now. Not
 * served: no row, or a row that never granted access (written `incomplete` while its first payment was pending: paid
 * after the ban it was written live; found by a review). A subscription that has served stays as the ban left it
 * (banned with cancelSubscriptions: canceled at period end; without: the admin chose to let it run).
 */
async function newPurchaseOfBannedUser(deps: BillingDeps, userId: string, subscription: Stripe.Subscription): Promise<boolean> {
  if (!isLive(subscription)) return false;
  const row = await first<{ banned: boolean; served: boolean }>(
    deps.database.db,
    sql`select public.banned_at(u.banned, u."banExpires", ${deps.clock.now()}) as banned,
               ${servedBefore(subscription.id)} as served
          from "user" u where u.id = ${userId}`,
  );
  return !!row?.banned && !row.served;
}

/**
 * A purchase of an agent an admin deleted (status `inactive`) that has not served yet: a checkout opened while the
 * agent was live and paid after its deletion (Stripe keeps the page payable for a day; anonymous ones too), or a row
 * written `incomplete` before the deletion whose first payment went through after it. Nothing of the agent can be used
 * any more (its client is disabled, its tokens revoked), so the purchase is refunded in full and canceled at Stripe
 * before anything is written or placed (no account is made for an anonymous buyer), and the read after that is what
 * gets written. Before, it was written live and the deletion's round only stopped its renewal: the buyer paid a whole
 * period nobody could use (review 30). One that has served is the deletion's round's (deleted-agents.ts: it runs to
 * its period's end, no automatic refund). A failure leaves the event unrecorded, so Stripe's redelivery runs this again.
 */
export async function undoPurchaseOfDeletedAgent(deps: BillingDeps, read: StripeRead): Promise<StripeRead> {
  const { subscription } = read;
  const priceId = subscription.items.data[0]?.price.id;
  if (!isLive(subscription) || !priceId) return read;
  const found = await first<{ agentId: string }>(
    deps.database.db,
    sql`select a.id as "agentId" from public.tiers t join public.agents a on a.id = t.agent_id
         where t.stripe_price_id = ${priceId} and a.status = 'inactive'
           and not ${servedBefore(subscription.id)}`,
  );
  if (!found) return read;
  const refunds = await refundAndCancel(deps, subscription, { metadata: { deletedAgentId: found.agentId } });
  deps.logger.warn('paid subscription of a deleted agent canceled and refunded before it served', {
    stripeSubscriptionId: subscription.id,
    agentId: found.agentId,
    refunds,
  });
  return readToApply(deps, subscription.id);
}

/** Whether an event id was already processed (a cheap pre-check; the SQL function is the real guard). */
export async function eventSeen(db: Db, eventId: string): Promise<boolean> {
  return !!(await first(db, sql`select 1 as seen from public.stripe_events where id = ${eventId}`));
}
