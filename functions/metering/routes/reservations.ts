import { createRoute, z } from '@hono/zod-openapi';
import type { Context } from 'hono';
import { requireBearer } from '../../http/access.ts';
import type { AppEnv } from '../../platform/app-types.ts';
import { envelopeOf, ok } from '../../http/envelope.ts';
import { errors, jsonBody, jsonResponse, newRouter, uuidParam, SECURITY } from '../../http/router.ts';
import { callReservationAsBearer, type ReservationCall, type ReservationOperation, type ReservationResult } from '../reservations.ts';
import { commitReservationBody, reservationSchema, reserveUsageBody } from '../schemas.ts';
import { quotaHeaders } from '../usage.ts';
import { idempotencyConflict409, quotaHeaderDocs, reserve429 } from './responses.ts';

/**
 * Usage reservations (/me/usage/{agentId}/...): hold units, then commit what was used or release the hold.
 * Agent backends only: the bearer token of the path agent's own client (contract.md, Trust boundaries).
 */

const agentParams = z.object({ agentId: uuidParam('agentId') });
// Any slug-shaped string is looked up; an unknown one is a 404 (the metric does not exist), not a 400.
const metricParams = agentParams.extend({
  metricSlug: z.string().min(1).max(64).openapi({ param: { name: 'metricSlug', in: 'path' }, example: 'llm-tokens' }),
});
const reservationParams = agentParams.extend({ reservationId: uuidParam('reservationId') });

const bearerOnly = SECURITY.bearerOnly;

const conflict409 = idempotencyConflict409(
  'the clientReqId (or the settled reservation) stands for another request; `details.original` is that request. Nothing changed',
);

const reserveRoute = createRoute({
  operationId: 'reserveUsage',
  method: 'post',
  path: '/me/usage/{agentId}/{metricSlug}/reservations',
  tags: ['Usage'],
  summary: 'Hold units before an action whose cost is known only afterwards',
  description:
    'Admits the hold only if used + live holds + amount stays within the effective quota, atomically with increments ' +
    '(an increment and a hold never both pass the limit). The hold counts against the quota until it is committed, released, ' +
    'or `expiresAt` passes (then its units are free again by themselves). Idempotent on clientReqId: a replay answers the same ' +
    'reservation (`X-Idempotent-Replay: true`), a denied reserve replays its 429, and the same clientReqId with another amount or ttl ' +
    '(or already used by an increment or decrement) is 409 IDEMPOTENCY_CONFLICT. A counter has at most 1,000 live holds: a reserve ' +
    'beyond that is 429 RATE_LIMITED, with Retry-After until its oldest hold expires, and is not recorded (not replayed).',
  security: bearerOnly,
  request: { params: metricParams, body: jsonBody(reserveUsageBody) },
  responses: {
    201: { ...jsonResponse(envelopeOf(reservationSchema), 'Held (or the reservation of this clientReqId)'), headers: quotaHeaderDocs },
    ...errors(400, 401, 402, 403, 404, 'unavailable'),
    ...reserve429,
    ...conflict409,
  },
});

const commitRoute = createRoute({
  operationId: 'commitReservation',
  method: 'post',
  path: '/me/usage/{agentId}/reservations/{reservationId}/commit',
  tags: ['Usage'],
  summary: 'Count the units actually used (0..held) and free the rest',
  description:
    'Idempotent: repeating the commit with the same amount answers the same reservation; another amount is 409 IDEMPOTENCY_CONFLICT. ' +
    'After `expiresAt`, or once released, it is 422 INVALID_STATE. An amount above the held amount is 400.',
  security: bearerOnly,
  request: { params: reservationParams, body: jsonBody(commitReservationBody) },
  responses: {
    200: { ...jsonResponse(envelopeOf(reservationSchema), 'Committed'), headers: quotaHeaderDocs },
    ...errors(400, 401, 402, 403, 404, 422, 'unavailable'),
    ...conflict409,
  },
});

const releaseRoute = createRoute({
  operationId: 'releaseReservation',
  method: 'post',
  path: '/me/usage/{agentId}/reservations/{reservationId}/release',
  tags: ['Usage'],
  summary: 'Free all held units (no body)',
  description: 'Idempotent: repeating answers the same reservation. After `expiresAt`, or once committed, it is 422 INVALID_STATE.',
  security: bearerOnly,
  request: { params: reservationParams },
  responses: {
    200: { ...jsonResponse(envelopeOf(reservationSchema), 'Released'), headers: quotaHeaderDocs },
    ...errors(400, 401, 402, 403, 404, 422, 'unavailable'),
  },
});

const getRoute = createRoute({
  operationId: 'getReservation',
  method: 'get',
  path: '/me/usage/{agentId}/reservations/{reservationId}',
  tags: ['Usage'],
  summary: 'A reservation and the usage of its metric',
  security: bearerOnly,
  request: { params: reservationParams },
  responses: {
    200: jsonResponse(envelopeOf(reservationSchema), 'The reservation'),
    ...errors(400, 401, 402, 403, 404, 'unavailable'),
  },
});

export function reservationRoutes() {
  const router = newRouter();

  router.openapi(reserveRoute, async (c) => {
    const { agentId, metricSlug } = c.req.valid('param');
    const { clientReqId, amount, ttlSeconds } = c.req.valid('json');
    const result = await reservation(c, 'reserve', { agentId, metricSlug, clientReqId, amount, ttlSeconds });
    return c.json(ok(result.reservation), 201, headers(result));
  });

  router.openapi(commitRoute, async (c) => {
    const { agentId, reservationId } = c.req.valid('param');
    const { amount } = c.req.valid('json');
    const result = await reservation(c, 'commit', { agentId, reservationId, amount });
    return c.json(ok(result.reservation), 200, headers(result));
  });

  router.openapi(releaseRoute, async (c) => {
    const { agentId, reservationId } = c.req.valid('param');
    const result = await reservation(c, 'release', { agentId, reservationId });
    return c.json(ok(result.reservation), 200, headers(result));
  });

  router.openapi(getRoute, async (c) => {
    const { agentId, reservationId } = c.req.valid('param');
    const result = await reservation(c, 'read', { agentId, reservationId });
    return c.json(ok(result.reservation), 200);
  });

  return router;
}

const headers = (result: ReservationResult) => quotaHeaders(result.reservation.usage, result.replayed);

/**
 * Reservations belong to the agent backend, like every usage write (contract.md, Trust boundaries): only the
 * bearer token of the path agent's own client. The caller check, that agent check and the reservation call run in
 * one statement. A cookie session answers 403.
 */
async function reservation(c: Context<AppEnv>, operation: ReservationOperation, call: ReservationCall) {
  const { database, clock } = c.var.deps;
  const check = await requireBearer(c);
  const { principal, result } = await callReservationAsBearer(database.db, clock, { operation, check, call });
  c.set('principal', Promise.resolve(principal));
  return result;
}
