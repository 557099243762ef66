import { createRoute, z } from '@hono/zod-openapi';
import { listMarketplaceSubscriptions, subscriptionSchema } from '../billing/index.ts';
import { requireAdmin } from '../http/access.ts';
import { envelopeOf, ok, okPage, pageEnvelopeOf } from '../http/envelope.ts';
import { adminPageQuery } from '../http/pagination.ts';
import { errors, jsonResponse, newRouter, SECURITY } from '../http/router.ts';
import { analyticsOneAtATime, analyticsQuerySchema, analyticsSchema, getAnalytics } from './analytics.ts';
import { adminPage } from './page.ts';
import { textParam } from './params.ts';
import { listSubscriptionsQuerySchema } from './subscriptions.ts';
import { adminUserSchema, getUserProfile, listUsers, listUsersQuerySchema, userProfileSchema } from './users.ts';

/** Administration reads: users with spend, one user's profile, all subscriptions, analytics, and the admin page. */

const security = SECURITY.sessionOrBearer;

const listUsersRoute = createRoute({
  operationId: 'listUsers',
  method: 'get',
  path: '/admin/users',
  tags: ['Administration'],
  summary: 'Users, newest first, each with their live subscription count and monthly spend',
  security,
  request: { query: adminPageQuery(listUsersQuerySchema.shape) },
  responses: { 200: jsonResponse(pageEnvelopeOf(adminUserSchema), 'A page of users'), ...errors(400, 401, 403) },
});

const getUserProfileRoute = createRoute({
  operationId: 'getUserProfile',
  method: 'get',
  path: '/admin/users/{userId}',
  tags: ['Administration'],
  summary: 'One user: base fields, ban state, subscriptions with agent and tier, organization memberships',
  security,
  request: {
    params: z.object({
      userId: textParam('userId', 255).openapi({ param: { name: 'userId', in: 'path' }, example: 'Xk3u9QpL2mZ7' }),
    }),
  },
  responses: { 200: jsonResponse(envelopeOf(userProfileSchema), 'The user profile'), ...errors(400, 401, 403, 404) },
});

const listSubscriptionsRoute = createRoute({
  operationId: 'listSubscriptions',
  method: 'get',
  path: '/admin/subscriptions',
  tags: ['Subscriptions (admin)'],
  summary: 'Every subscription, newest first; filter by user, agent and status',
  security,
  request: { query: adminPageQuery(listSubscriptionsQuerySchema.shape) },
  responses: { 200: jsonResponse(pageEnvelopeOf(subscriptionSchema), 'A page of subscriptions'), ...errors(400, 401, 403) },
});

const getAnalyticsRoute = createRoute({
  operationId: 'getAnalytics',
  method: 'get',
  path: '/admin/analytics',
  tags: ['Administration'],
  summary: 'Funnel (purchased, activated, used), per-agent breakdown and weekly lifecycle trends over a window',
  description:
    'Window [from, to], both inclusive; a date-only `to` includes that whole day (UTC). Default: the last 90 days. ' +
    'purchased = subscriptions created in the window that were bought (a checkout never paid is none); activated = of those, with a usage increment or an ' +
    'install of the agent by `to`; used = of those, with a usage increment in the last 30 days of the window. Weeks are ISO ' +
    'weeks (Monday, UTC). A reversed window, or one longer than 5 years, is a 400; an unknown agentId a 404; a second ' +
    'request of the same admin while one is being computed, 429 with Retry-After.',
  security,
  request: { query: analyticsQuerySchema },
  responses: { 200: jsonResponse(envelopeOf(analyticsSchema), 'Analytics for the window'), ...errors(400, 401, 403, 404, 429) },
});

export function adminRoutes() {
  const router = newRouter();

  router.openapi(listUsersRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    const { items, pagination } = await listUsers(deps.database.db, deps.cursors, deps.config.platformCurrency, c.req.valid('query'));
    return c.json(okPage(items, pagination), 200);
  });

  router.openapi(getUserProfileRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    const profile = await getUserProfile(deps.database.db, deps.clock, deps.config.platformCurrency, c.req.valid('param').userId);
    return c.json(ok(profile), 200);
  });

  router.openapi(listSubscriptionsRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    const { items, pagination } = await listMarketplaceSubscriptions(deps.database.db, deps.clock, deps.cursors, c.req.valid('query'));
    return c.json(okPage(items, pagination), 200);
  });

  router.openapi(getAnalyticsRoute, async (c) => {
    const admin = await requireAdmin(c);
    const { deps } = c.var;
    const analytics = await analyticsOneAtATime(admin.userId, () => getAnalytics(deps.database.db, deps.clock, c.req.valid('query')));
    return c.json(ok(analytics), 200);
  });

  // The page is HTML, not an API operation: it stays out of the OpenAPI document. Access is checked inside.
  router.get('/admin', (c) => adminPage(c));

  return router;
}
