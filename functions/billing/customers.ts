import type { BillingDeps } from './billing-deps.ts';
import { first, sql } from '../platform/db.ts';
import { askStripe, isStripeMissing, requirePayments } from './payments.ts';

/**
 * One Stripe customer per marketplace user, made on the first paid checkout and reused afterwards (so the
 * portal shows every subscription and saved card together). The idempotency key makes two concurrent first
 * checkouts of the same user create one customer at Stripe.
 *
 * A customer deleted at Stripe (its `customer.deleted` event: forgetDeletedCustomer) is no longer the user's: the
 * portal has no billing account for them, and their next paid checkout makes a new customer, whose idempotency key
 * names the deleted one (the first create's key would have Stripe replay its answer, the deleted customer, for 24
 * hours). Before, the deleted customer stayed linked and every paid checkout and portal session answered 422 "No such
 * customer" for good (review 79; migration 20261127006000).
 */
export async function customerIdOf(deps: BillingDeps, userId: string): Promise<string | undefined> {
  const link = await linkOf(deps, userId);
  return link && !link.deleted ? link.id : undefined;
}

/** The user's link to a Stripe customer, also one Stripe deleted since. */
function linkOf(deps: BillingDeps, userId: string) {
  return first<{ id: string; deleted: boolean }>(
    deps.database.db,
    sql`select stripe_customer_id as id, deleted_at is not null as deleted from public.billing_customers where user_id = ${userId}`,
  );
}

async function ensureCustomer(deps: BillingDeps, user: { userId: string; email: string; name?: string | undefined }): Promise<string> {
  const link = await linkOf(deps, user.userId);
  if (link && !link.deleted) return link.id;
  const { stripe } = requirePayments(deps);
  // Stripe refusing the customer (an address it will not take) is the buyer's 422 with its reason, not a 500.
  const customer = await askStripe('the customer', () =>
    stripe.customers.create(
      { email: user.email, ...(user.name ? { name: user.name } : {}), metadata: { userId: user.userId } },
      { idempotencyKey: link ? `marketplace-customer:${user.userId}:after:${link.id}` : `marketplace-customer:${user.userId}` },
    ),
  );
  // Two first checkouts at once made the same customer (the same key): the second finds it linked already.
  await linkCustomer(deps, user.userId, customer.id);
  return (await customerIdOf(deps, user.userId)) ?? customer.id;
}

/**
 * Runs a Stripe request naming the buyer's customer (`ask`), made first if they have none. When Stripe answers that
 * the customer no longer exists (deleted at Stripe, and its `customer.deleted` event not here yet, or lost), the link
 * is marked as the event would have, and the request runs again with the customer the user has now (another
 * subscription's, or a new one): the buyer's checkout works at once instead of answering 422 "No such customer" until
 * the event arrives.
 */
export function withCustomer<T>(
  deps: BillingDeps,
  buyer: { userId: string; email: string; name?: string | undefined },
  ask: (customerId: string) => Promise<T>,
): Promise<T> {
  return withLiveCustomer(deps, () => ensureCustomer(deps, buyer), ask);
}

/**
 * Runs `ask` with the customer `customerOf` gives (undefined: `none`), and again with the next one each time Stripe
 * says the one named is gone (forgetIfMissing, which may leave the link to another live subscription's customer). A
 * user has at most a few customers (their own, and those of purchases made signed out), so a few tries reach a live
 * one or none; two deleted ones whose events were both late took two (review 85).
 */
export async function withLiveCustomer<T>(
  deps: BillingDeps,
  customerOf: () => Promise<string | undefined>,
  ask: (customerId: string) => Promise<T>,
  none: () => Error = () => new Error('no Stripe customer for this user'),
): Promise<T> {
  for (let tries = 1; ; tries++) {
    const customer = await customerOf();
    if (!customer) throw none();
    try {
      return await ask(customer);
    } catch (err) {
      if (tries >= MISSING_CUSTOMER_TRIES || !(await forgetIfMissing(deps, customer, err))) throw err;
    }
  }
}
const MISSING_CUSTOMER_TRIES = 4;

/**
 * Stripe's answer `err` to a request naming `customerId` says that customer does not exist: the link is marked deleted
 * (forgetDeletedCustomer) and true returned. Only Stripe's own "No such customer" for the `customer` parameter counts.
 */
export async function forgetIfMissing(deps: BillingDeps, customerId: string, err: unknown): Promise<boolean> {
  if (!isStripeMissing(err) || (err as { param?: string }).param !== 'customer') return false;
  await forgetDeletedCustomer(deps, customerId);
  return true;
}

/**
 * Links a Stripe customer to the user (SQL billing_link_customer, migration 20261127006100): their first, or the
 * live one that takes the place of one deleted at Stripe; a user's live link stays.
 */
export async function linkCustomer(deps: BillingDeps, userId: string, stripeCustomerId: string): Promise<void> {
  await sql`select public.billing_link_customer(${userId}, ${stripeCustomerId}, ${deps.clock.now()}::timestamptz)`.execute(deps.database.db);
}

/**
 * Stripe deleted the customer (`customer.deleted`): its link is marked, so nothing names it again, or moves to the
 * customer of another subscription the user still holds (SQL billing_forget_customer). Repeating it is safe.
 */
export async function forgetDeletedCustomer(deps: BillingDeps, stripeCustomerId: string): Promise<void> {
  await sql`select public.billing_forget_customer(${stripeCustomerId}, ${deps.clock.now()}::timestamptz)`.execute(deps.database.db);
}
