import type { BillingDeps } from './billing-deps.ts';
import { first, rows, sql } from '../platform/db.ts';
import { subscriptionColumns, toSubscriptionDto, type SubscriptionDto, type SubscriptionRow } from './subscriptions.ts';

/** Billing's reads of subscriptions: the DTO plus the Stripe links the paid paths need. */

/**
 * The API shape (SubscriptionDto, its fields at the top level for billing's code) plus the Stripe links, which
 * never leave the service: a response sends `dto`, never the whole object.
 */
export type BillingSubscription = SubscriptionDto & {
  dto: SubscriptionDto;
  stripeSubscriptionId: string | null;
  stripeCustomerId: string | null;
  pendingInvoiceId: string | null;
  stripeScheduleId: string | null;
};

interface Row extends SubscriptionRow {
  stripe_customer_id: string | null;
  pending_invoice_id: string | null;
  stripe_schedule_id: string | null;
}

const columns = (now: Date) =>
  sql`${subscriptionColumns(now)}, s.stripe_customer_id, s.pending_invoice_id, s.stripe_schedule_id`;

function toBilling(row: Row): BillingSubscription {
  const dto = toSubscriptionDto(row);
  return {
    ...dto,
    dto,
    stripeSubscriptionId: row.stripe_subscription_id,
    stripeCustomerId: row.stripe_customer_id,
    pendingInvoiceId: row.pending_invoice_id,
    stripeScheduleId: row.stripe_schedule_id,
  };
}

export async function billingSubscription(deps: BillingDeps, subscriptionId: string): Promise<BillingSubscription | undefined> {
  const row = await first<Row>(
    deps.database.db,
    sql`select ${columns(deps.clock.now())} from public.subscriptions s where s.id = ${subscriptionId}`,
  );
  return row && toBilling(row);
}

/** The user's non-canceled subscription to the agent (active, past_due or incomplete), if any. */
export async function liveSubscription(deps: BillingDeps, userId: string, agentId: string): Promise<BillingSubscription | undefined> {
  const row = await first<Row>(
    deps.database.db,
    sql`select ${columns(deps.clock.now())} from public.subscriptions s
        where s.user_id = ${userId} and s.agent_id = ${agentId} and s.status <> 'canceled' limit 1`,
  );
  return row && toBilling(row);
}

export async function findSubscriptionByStripeId(deps: BillingDeps, stripeSubscriptionId: string): Promise<SubscriptionDto | undefined> {
  const row = await first<SubscriptionRow>(
    deps.database.db,
    sql`select ${subscriptionColumns(deps.clock.now())} from public.subscriptions s
        where s.stripe_subscription_id = ${stripeSubscriptionId}`,
  );
  return row && toSubscriptionDto(row);
}

/**
 * The user's subscriptions (all statuses, newest first; not paginated: a user has at most one live subscription
 * per agent, so the list stays short).
 */
export async function listUserSubscriptions(deps: BillingDeps, userId: string): Promise<SubscriptionDto[]> {
  const found = await rows<SubscriptionRow>(
    deps.database.db,
    sql`select ${subscriptionColumns(deps.clock.now())} from public.subscriptions s
        where s.user_id = ${userId} order by s.created_at desc, s.id desc`,
  );
  return found.map(toSubscriptionDto);
}

/** The user's live subscriptions, free and paid (for cancelling them all, e.g. when an admin bans the user). */
export async function liveSubscriptionsOf(deps: BillingDeps, userId: string): Promise<BillingSubscription[]> {
  const found = await rows<Row>(
    deps.database.db,
    sql`select ${columns(deps.clock.now())} from public.subscriptions s
        where s.user_id = ${userId} and s.status <> 'canceled'`,
  );
  return found.map(toBilling);
}
