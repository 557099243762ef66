import type { BillingDeps } from './billing-deps.ts';
import { first, sql } from '../platform/db.ts';
import { askStripe, requirePayments } from './payments.ts';

/**
 * One Stripe customer per marketplace user, made on the first paid checkout and reused afterwards (so the
 * portal shows every subscription and saved card together). The idempotency key makes two concurrent first
 * checkouts of the same user create one customer at Stripe.
 */
export async function customerIdOf(deps: BillingDeps, userId: string): Promise<string | undefined> {
  const row = await first<{ id: string }>(
    deps.database.db,
    sql`select stripe_customer_id as id from public.billing_customers where user_id = ${userId}`,
  );
  return row?.id;
}

export async function ensureCustomer(deps: BillingDeps, user: { userId: string; email: string; name?: string | undefined }): Promise<string> {
  const existing = await customerIdOf(deps, user.userId);
  if (existing) return existing;
  const { stripe } = requirePayments(deps);
  // Stripe refusing the customer (an address it will not take) is the buyer's 422 with its reason, not a 500.
  const customer = await askStripe('the customer', () =>
    stripe.customers.create(
      { email: user.email, ...(user.name ? { name: user.name } : {}), metadata: { userId: user.userId } },
      { idempotencyKey: `marketplace-customer:${user.userId}` },
    ),
  );
  // No conflict target: two first checkouts insert the same (user, customer) row at once, and with a target of
  // user_id only, the loser can trip over the other unique index (stripe_customer_id) and fail with 23505.
  await first(
    deps.database.db,
    sql`insert into public.billing_customers (user_id, stripe_customer_id, created_at)
        values (${user.userId}, ${customer.id}, ${deps.clock.now()})
        on conflict do nothing`,
  );
  return (await customerIdOf(deps, user.userId)) ?? customer.id;
}
