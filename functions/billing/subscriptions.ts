import { z } from '@hono/zod-openapi';
import { ApiError, isUniqueViolation, notFound } from '../http/errors.ts';
import type { Clock } from '../platform/clock.ts';
import { first, sql, type Db, type RawBuilder } from '../platform/db.ts';
import { iso } from '../platform/clock.ts';

/**
 * Subscriptions: the DTO, the lookup metering and /me use ("active" = `active` or `past_due`), and starting
 * a subscription on a free tier (no payment, created directly).
 *
 * Billing period: a subscription billed by Stripe (stripe_subscription_id set) has Stripe's current period,
 * stored by the webhook. Any other subscription runs monthly from its start, the same day each month, clamped
 * to the month's end; its stored current_period_start is that anchor and the period in effect is computed from
 * it at read time by the SQL function `billing_period` (migration 20261122000500), so no job rolls it over and
 * metering counts against exactly the same period the DTO shows.
 */

export const SUBSCRIPTION_STATUSES = ['active', 'past_due', 'canceled', 'incomplete'] as const;
export type SubscriptionStatus = (typeof SUBSCRIPTION_STATUSES)[number];

/**
 * Statuses that grant access (to metering and /me/subscriptions/{agentId}): active, or past due while Stripe
 * retries. SQL owns the rule: `public.subscription_grants_access(status)` (migration 20261125000100), which the
 * metering functions and every query call; this is its one TypeScript mirror, for rows already read, and
 * tests/foundation/status-rules.test.ts checks that both agree on every status.
 */
export const ACTIVE_STATUSES: readonly SubscriptionStatus[] = ['active', 'past_due'];

export const grantsAccess = (status: SubscriptionStatus) => ACTIVE_STATUSES.includes(status);

export const subscriptionSchema = z
  .object({
    id: z.uuid(),
    userId: z.string(),
    agentId: z.uuid(),
    tierId: z.uuid(),
    status: z.enum(SUBSCRIPTION_STATUSES),
    currentPeriodStart: z.string().openapi({ example: '2026-11-22T05:00:00.000Z' }),
    currentPeriodEnd: z.string().openapi({ example: '2026-12-22T05:00:00.000Z' }),
    cancelAtPeriodEnd: z.boolean(),
    pendingTierId: z.uuid().nullable(),
    pendingChangeKind: z.enum(['upgrade', 'downgrade']).nullable(),
    createdAt: z.string(),
  })
  .openapi('Subscription');

/** A subscription as the API shows it: the type is the schema's, so the two cannot drift. */
export type SubscriptionDto = z.infer<typeof subscriptionSchema>;

/** A subscription row as selected by `subscriptionColumns` (period already resolved for `now`). */
export interface SubscriptionRow {
  id: string;
  user_id: string;
  agent_id: string;
  tier_id: string;
  status: SubscriptionStatus;
  period_start: Date | string;
  period_end: Date | string;
  cancel_at_period_end: boolean;
  pending_tier_id: string | null;
  pending_change_kind: 'upgrade' | 'downgrade' | null;
  stripe_subscription_id: string | null;
  created_at: Date | string;
}

/**
 * Select list for a subscription aliased `s`, with the billing period in effect at `now`. Use as
 * `select ${subscriptionColumns(now)} from public.subscriptions s where ...`.
 */
export function subscriptionColumns(now: Date): RawBuilder<unknown> {
  // scalar subqueries, not a join: this list also serves RETURNING clauses; billing_period is inlined, so each costs
  // a few expressions
  const period = sql`public.billing_period(s.current_period_start, s.current_period_end, s.stripe_subscription_id is null, ${now}::timestamptz)`;
  return sql`s.id, s.user_id, s.agent_id, s.tier_id, s.status,
    (select p.period_start from ${period} p) as period_start, (select p.period_end from ${period} p) as period_end,
    s.cancel_at_period_end, s.pending_tier_id, s.pending_change_kind, s.stripe_subscription_id, s.created_at`;
}


export function toSubscriptionDto(row: SubscriptionRow): SubscriptionDto {
  return {
    id: row.id,
    userId: row.user_id,
    agentId: row.agent_id,
    tierId: row.tier_id,
    status: row.status,
    currentPeriodStart: iso(row.period_start),
    currentPeriodEnd: iso(row.period_end),
    cancelAtPeriodEnd: row.cancel_at_period_end,
    pendingTierId: row.pending_tier_id,
    pendingChangeKind: row.pending_change_kind,
    createdAt: iso(row.created_at),
  };
}

/** The user's active (`active` or `past_due`) subscription to the agent, if any. */
export async function findActiveSubscription(
  db: Db,
  clock: Clock,
  userId: string,
  agentId: string,
): Promise<SubscriptionDto | undefined> {
  const row = await first<SubscriptionRow>(
    db,
    sql`select ${subscriptionColumns(clock.now())} from public.subscriptions s
        where s.user_id = ${userId} and s.agent_id = ${agentId} and public.subscription_grants_access(s.status)
        limit 1`,
  );
  return row && toSubscriptionDto(row);
}

/** A subscription by id, any status. */
export async function findSubscription(db: Db, clock: Clock, subscriptionId: string): Promise<SubscriptionDto | undefined> {
  const row = await first<SubscriptionRow>(
    db,
    sql`select ${subscriptionColumns(clock.now())} from public.subscriptions s where s.id = ${subscriptionId}`,
  );
  return row && toSubscriptionDto(row);
}

/**
 * Starts an `active` subscription on a free tier (price 0), its first period beginning now.
 * At most one non-canceled subscription per (user, agent) (a unique index): starting the same free tier again
 * returns the existing subscription with `created: false` (a retried request is harmless); holding any other
 * live subscription to the agent is a 409 CONFLICT (changing tier is a different operation). A tier deleted, archived
 * or hidden (or its agent no longer active) by the time the subscription is written is a 404, like one never offered.
 */
export async function startFreeSubscription(
  db: Db,
  clock: Clock,
  input: { userId: string; tierId: string },
): Promise<{ subscription: SubscriptionDto; created: boolean }> {
  const now = clock.now();
  const tier = await first<{ agent_id: string; price_cents: number }>(
    db,
    sql`select agent_id, price_cents from public.tiers where id = ${input.tierId}`,
  );
  if (!tier) throw notFound('Tier', { tierId: input.tierId });
  if (tier.price_cents !== 0) {
    throw new ApiError('INVALID_STATE', 'This tier is paid: start a checkout instead', { tierId: input.tierId });
  }
  let row: (Partial<SubscriptionRow> & { offered: boolean }) | undefined;
  try {
    // The tier is read again in the insert, as the checkout found it (not archived, public, of an active agent) and
    // held `for key share`, what the foreign key check takes: a deletion of the tier committed since the checkout's read
    // leaves no row (the insert's foreign key answered 500), an archiving or hiding committed since leaves none either
    // (a subscription was written on a tier closed to new buyers), and a deletion that comes after waits for this
    // insert and then archives the tier instead (deleteTier). No row: 404, as for a tier that never was open (review 19).
    // The first period runs one calendar month from now (billing_period clamps to the month's end).
    row = await first<Partial<SubscriptionRow> & { offered: boolean }>(
      db,
      sql`with offered as (
            select t.id, t.agent_id from public.tiers t
             where t.id = ${input.tierId} and t.archived_at is null and t.is_public and t.price_cents = 0
               and exists (select 1 from public.agents a where a.id = t.agent_id and a.status = 'active')
               for key share
          ), added as (
            insert into public.subscriptions as s
              (user_id, agent_id, tier_id, status, current_period_start, current_period_end, created_at, updated_at)
            select ${input.userId}, offered.agent_id, offered.id, 'active', ${now}::timestamptz, p.period_end,
                   ${now}::timestamptz, ${now}::timestamptz
            from offered, public.billing_period(${now}::timestamptz, null, true, ${now}::timestamptz) p
            on conflict (user_id, agent_id) where status <> 'canceled' do nothing
            returning s.*
          )
          select r.*, exists (select 1 from offered) as offered
            from (select 1) one left join (select ${subscriptionColumns(now)} from added s) r on true`,
    );
  } catch (err) {
    // The conflict target covers the one-live-subscription index; any other unique violation is a bug.
    if (isUniqueViolation(err)) throw conflictWithLive(tier.agent_id);
    throw err;
  }
  if (!row?.offered) throw notFound('Tier', { tierId: input.tierId });
  if (row.id) return { subscription: toSubscriptionDto(row as SubscriptionRow), created: true };

  const live = await first<SubscriptionRow>(
    db,
    sql`select ${subscriptionColumns(now)} from public.subscriptions s
        where s.user_id = ${input.userId} and s.agent_id = ${tier.agent_id} and s.status <> 'canceled'
        limit 1`,
  );
  if (live && live.tier_id === input.tierId && grantsAccess(live.status)) {
    return { subscription: toSubscriptionDto(live), created: false };
  }
  throw conflictWithLive(tier.agent_id, live?.id);
}

function conflictWithLive(agentId: string, subscriptionId?: string) {
  return new ApiError('CONFLICT', 'You already have a subscription to this agent; change its tier instead', {
    agentId,
    ...(subscriptionId ? { subscriptionId } : {}),
  });
}
