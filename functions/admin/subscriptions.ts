import { z } from '@hono/zod-openapi';
import {
  SUBSCRIPTION_STATUSES,
  subscriptionColumns,
  toSubscriptionDto,
  type SubscriptionDto,
  type SubscriptionRow,
} from '../billing/subscriptions.ts';
import type { Pagination } from '../http/envelope.ts';
import { afterCursor, finishPage, pageScope, readPage, type CursorSigner } from '../http/pagination.ts';
import type { Clock } from '../platform/clock.ts';
import { textParam } from './params.ts';
import { rows, sql, type Db } from '../platform/db.ts';

/**
 * Every subscription in the marketplace, newest first, optionally narrowed to one user, one agent and/or one
 * status. Each filter has an index leading with its column and ending in (created_at desc, id desc), so any page
 * is one index range scan.
 */

export const listSubscriptionsQuerySchema = z.object({
  userId: textParam('userId', 255)
    .optional()
    .openapi({ param: { name: 'userId', in: 'query' }, description: 'Only this user’s subscriptions' }),
  agentId: z
    .uuid({ message: 'agentId must be a UUID' })
    .optional()
    .openapi({ param: { name: 'agentId', in: 'query' }, description: 'Only subscriptions to this agent' }),
  status: z
    .enum(SUBSCRIPTION_STATUSES)
    .optional()
    .openapi({ param: { name: 'status', in: 'query' }, description: 'Only this status' }),
});

export async function listSubscriptions(
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
