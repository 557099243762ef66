import type { Pagination } from '../http/envelope.ts';
import { afterCursor, finishPage, pageScope, readPage, type CursorSigner } from '../http/pagination.ts';
import type { Clock } from '../platform/clock.ts';
import { rows, sql, type Db } from '../platform/db.ts';
import { subscriptionColumns, toSubscriptionDto, type SubscriptionDto, type SubscriptionRow } from './subscriptions.ts';

/**
 * The subscription lists the admin pages read (admin/routes.ts): billing owns the subscription rows and their
 * columns, so these queries live here and the admin room calls them through billing/index.ts.
 */

/**
 * listSubscriptions: every subscription in the marketplace, newest first, optionally narrowed to one user, one
 * agent and/or one status. Each filter has an index leading with its column and ending in (created_at desc, id desc), so any page
 * is one index range scan.
 */
export async function listMarketplaceSubscriptions(
  db: Db,
  clock: Clock,
  cursors: CursorSigner,
  query: {
    userId?: string | undefined;
    agentId?: string | undefined;
    status?: string | undefined;
    cursor?: string | undefined;
    limit?: number | undefined;
  },
): Promise<{ items: SubscriptionDto[]; pagination: Pagination }> {
  const page = await readPage(
    cursors,
    pageScope('admin/subscriptions', { userId: query.userId, agentId: query.agentId, status: query.status }),
    query,
  );
  const found = await rows<SubscriptionRow>(
    db,
    sql`select ${subscriptionColumns(clock.now())}
        from public.subscriptions s
        where ${query.userId !== undefined ? sql`s.user_id = ${query.userId}` : sql`true`}
          and ${query.agentId !== undefined ? sql`s.agent_id = ${query.agentId}` : sql`true`}
          and ${query.status !== undefined ? sql`s.status = ${query.status}` : sql`true`}
          and ${afterCursor(page, 's')}
        order by s.created_at desc, s.id desc
        limit ${page.limit + 1}`,
  );
  const { items, pagination } = await finishPage(cursors, page, found.map(toSubscriptionDto));
  return { items, pagination };
}

/** A subscription with the agent and the tier it is for (the admin's user profile). */
export interface SubscriptionWithAgentAndTier extends SubscriptionDto {
  agent: { id: string; slug: string; name: string; status: string };
  tier: { id: string; name: string; priceCents: number; currency: string; interval: 'month' | 'year' };
}

interface SubscriptionWithAgentAndTierRow extends SubscriptionRow {
  agent_slug: string;
  agent_name: string;
  agent_status: string;
  tier_name: string;
  price_cents: number;
  currency: string;
  interval: 'month' | 'year';
}

/** Every subscription of one user, newest first, with its agent and tier. */
export async function subscriptionsWithAgentAndTier(db: Db, clock: Clock, userId: string): Promise<SubscriptionWithAgentAndTier[]> {
  const found = await rows<SubscriptionWithAgentAndTierRow>(
    db,
    sql`select ${subscriptionColumns(clock.now())},
               a.slug as agent_slug, a.name as agent_name, a.status as agent_status,
               t.name as tier_name, t.price_cents, t.currency, t.interval
        from public.subscriptions s
        join public.agents a on a.id = s.agent_id
        join public.tiers t on t.id = s.tier_id
        where s.user_id = ${userId}
        order by s.created_at desc, s.id desc`,
  );
  return found.map((r) => ({
    ...toSubscriptionDto(r),
    agent: { id: r.agent_id, slug: r.agent_slug, name: r.agent_name, status: r.agent_status },
    tier: { id: r.tier_id, name: r.tier_name, priceCents: Number(r.price_cents), currency: r.currency, interval: r.interval },
  }));
}
