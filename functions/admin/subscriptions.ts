import { z } from '@hono/zod-openapi';
import { SUBSCRIPTION_STATUSES } from '../billing/index.ts';
import { textParam } from './params.ts';

/** The filters of listSubscriptions (the query itself: billing's listMarketplaceSubscriptions). */
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
