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
  if (link) {
    // only over the deleted one: two checkouts at once made the same customer (the same key), and the second finds
    // the link already moved to it
    await sql`update public.billing_customers set stripe_customer_id = ${customer.id}, deleted_at = null, created_at = ${deps.clock.now()}
               where user_id = ${user.userId} and stripe_customer_id = ${link.id} and deleted_at is not null`.execute(deps.database.db);
  } else {
    // No conflict target: two first checkouts insert the same (user, customer) row at once, and with a target of
    // user_id only, the loser can trip over the other unique index (stripe_customer_id) and fail with 23505.
    await first(
      deps.database.db,
      sql`insert into public.billing_customers (user_id, stripe_customer_id, created_at)
          values (${user.userId}, ${customer.id}, ${deps.clock.now()})
          on conflict do nothing`,
    );
  }
  return (await customerIdOf(deps, user.userId)) ?? customer.id;
}

/**
 * Runs a Stripe request naming the buyer's customer (`ask`), made first if they have none. When Stripe answers that
 * the customer no longer exists (deleted at Stripe, and its `customer.deleted` event not here yet, or lost), the link
 * is marked as the event would have, and the request runs once more with a new customer: the buyer's checkout works
 * at once instead of answering 422 "No such customer" until the event arrives.
 */
export async function withCustomer<T>(
  deps: BillingDeps,
  buyer: { userId: string; email: string; name?: string | undefined },
  ask: (customerId: string) => Promise<T>,
): Promise<T> {
  const customer = await ensureCustomer(deps, buyer);
  try {
    return await ask(customer);
  } catch (err) {
    if (!(await forgetIfMissing(deps, customer, err))) throw err;
    return ask(await ensureCustomer(deps, buyer));
  }
}

/**
 * Stripe's answer `err` to a request naming `customerId` says that customer does not exist: the link is marked deleted
 * (forgetDeletedCustomer) and true returned. Only Stripe's own "No such customer" for the `customer` parameter counts.
 */
export async function forgetIfMissing(deps: BillingDeps, customerId: string, err: unknown): Promise<boolean> {
  if (!isStripeMissing(err) || (err as { param?: string }).param !== 'customer') return false;
  await forgetDeletedCustomer(deps, customerId);
  return true;
}

/** Stripe deleted the customer (`customer.deleted`): its link is marked, so nothing names it again. Repeating it is safe. */
export async function forgetDeletedCustomer(deps: BillingDeps, stripeCustomerId: string): Promise<void> {
  await sql`update public.billing_customers set deleted_at = ${deps.clock.now()}
             where stripe_customer_id = ${stripeCustomerId} and deleted_at is null`.execute(deps.database.db);
}
