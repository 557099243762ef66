import { createRoute, z } from '@hono/zod-openapi';
import { requireBearer, requireUser } from '../../http/access.ts';
import { envelopeOf, ok } from '../../http/envelope.ts';
import { errors, jsonBody, jsonResponse, newRouter, uuidParam, SECURITY } from '../../http/router.ts';
import { decrementUsageBody, incrementUsageBody, usageRecordSchema, usageResultSchema } from '../schemas.ts';
import type { Context } from 'hono';
import type { AppEnv } from '../../platform/app-types.ts';
import { getMyUsage, listMyUsage, meterUsageAsBearer, quotaHeaders, type UsageCall, type UsageOperation } from '../usage.ts';
import { idempotencyConflict409, quotaExceeded429, quotaHeaderDocs } from './responses.ts';

/**
 * /me/usage: agent backends (with the user's bearer token) and the user (cookie) read and move their counters.
 * The increment handler is the hot path: validate, verify the bearer JWT in process, one SQL call, answer.
 */

const agentParams = z.object({ agentId: uuidParam('agentId') });
// Any slug-shaped string is looked up; an unknown one is a 404 (the metric does not exist), not a 400.
const metricParams = agentParams.extend({
  metricSlug: z.string().min(1).max(64).openapi({ param: { name: 'metricSlug', in: 'path' }, example: 'api-calls' }),
});

const security = SECURITY.sessionOrBearer;
const idempotencyConflict = idempotencyConflict409(
  'this clientReqId was first used for another request (operation, amount or ttl); `details.original` is that request. Nothing changed',
);
/** Usage writes: the path agent's own bearer token only. */
const bearerOnly = SECURITY.bearerOnly;

const incrementRoute = createRoute({
  operationId: 'incrementUsage',
  method: 'post',
  path: '/me/usage/{agentId}/{metricSlug}/increment',
  tags: ['Usage'],
  summary: 'Check and increment: atomic and idempotent on (subscription, metric, clientReqId)',
  description:
    'Call before the chargeable action. Admits the increment only if used + live reservations + amount stays within the effective quota ' +
    '(tier quota + active addons). A replay of a clientReqId returns the first call\'s result (`replayed: true`), even a 429, and changes nothing; ' +
    'the same clientReqId with another amount, or already used by a decrement or reserve, is 409 IDEMPOTENCY_CONFLICT.',
  security: bearerOnly,
  request: { params: metricParams, body: jsonBody(incrementUsageBody) },
  responses: {
    200: { ...jsonResponse(envelopeOf(usageResultSchema), 'Counted (or the stored result of this clientReqId)'), headers: quotaHeaderDocs },
    ...errors(400, 401, 402, 403, 404, 'unavailable'),
    ...quotaExceeded429,
    ...idempotencyConflict,
  },
});

const decrementRoute = createRoute({
  operationId: 'decrementUsage',
  method: 'post',
  path: '/me/usage/{agentId}/{metricSlug}/decrement',
  tags: ['Usage'],
  summary: 'Decrement a fixed metric (floors at 0); idempotent when a clientReqId is given',
  security: bearerOnly,
  request: { params: metricParams, body: jsonBody(decrementUsageBody) },
  responses: {
    200: { ...jsonResponse(envelopeOf(usageResultSchema), 'Decremented (or the stored result of this clientReqId)'), headers: quotaHeaderDocs },
    ...errors(400, 401, 402, 403, 404, 422, 'unavailable'),
    ...idempotencyConflict,
  },
});

const listRoute = createRoute({
  operationId: 'listMyUsage',
  method: 'get',
  path: '/me/usage/{agentId}',
  tags: ['Usage'],
  summary: "Usage of every metric of the agent on the caller's active subscription",
  security,
  request: { params: agentParams },
  responses: {
    200: jsonResponse(envelopeOf(z.array(usageRecordSchema)), 'One usage record per metric'),
    ...errors(400, 401, 403, 404, 'unavailable', 'cookieRead'),
  },
});

const getRoute = createRoute({
  operationId: 'getMyUsage',
  method: 'get',
  path: '/me/usage/{agentId}/{metricSlug}',
  tags: ['Usage'],
  summary: "Usage of one metric on the caller's active subscription",
  security,
  request: { params: metricParams },
  responses: {
    200: jsonResponse(envelopeOf(usageRecordSchema), 'The usage record'),
    ...errors(400, 401, 403, 404, 'unavailable', 'cookieRead'),
  },
});

export function usageRoutes() {
  const router = newRouter();

  router.openapi(incrementRoute, async (c) => {
    const { agentId, metricSlug } = c.req.valid('param');
    const { clientReqId, amount } = c.req.valid('json');
    const result = await meter(c, 'increment', { agentId, metricSlug, clientReqId, amount: amount ?? 1 });
    return c.json(ok(result), 200, quotaHeaders(result, result.replayed));
  });

  router.openapi(decrementRoute, async (c) => {
    const { agentId, metricSlug } = c.req.valid('param');
    const { clientReqId, amount } = c.req.valid('json');
    const result = await meter(c, 'decrement', { agentId, metricSlug, clientReqId, amount: amount ?? 1 });
    return c.json(ok(result), 200, quotaHeaders(result, result.replayed));
  });

  router.openapi(listRoute, async (c) => {
    const principal = await requireUser(c);
    const { agentId } = c.req.valid('param');
    const { database, clock } = c.var.deps;
    return c.json(ok(await listMyUsage(database.db, clock, principal.userId, agentId)), 200);
  });

  router.openapi(getRoute, async (c) => {
    const principal = await requireUser(c);
    const { agentId, metricSlug } = c.req.valid('param');
    const { database, clock } = c.var.deps;
    return c.json(ok(await getMyUsage(database.db, clock, { userId: principal.userId, agentId, metricSlug })), 200);
  });

  return router;
}

/**
 * Usage writes belong to the agent backend (contract.md, Trust boundaries): only the bearer token of the path
 * agent's own client may change usage. The caller check, that agent check and the usage call run in one statement
 * (one round trip). A cookie session, the user's own browser, answers 403: a user must not un-count what they used.
 */
async function meter(c: Context<AppEnv>, operation: UsageOperation, call: Omit<UsageCall, 'userId'>) {
  const { database, clock } = c.var.deps;
  const check = await requireBearer(c);
  const { principal, result } = await meterUsageAsBearer(database.db, clock, { operation, check, call });
  c.set('principal', Promise.resolve(principal));
  return result;
}
