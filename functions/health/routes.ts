import { createRoute, z } from '@hono/zod-openapi';
import { envelopeOf } from '../http/envelope.ts';
import { ok } from '../http/envelope.ts';
import { ApiError } from '../http/errors.ts';
import { errors, jsonResponse, newRouter } from '../http/router.ts';
import { sql } from '../platform/db.ts';
import { healthRecord as buildHealthRecord } from './record.ts';

const healthRecord = z
  .object({
    status: z.literal('ok'),
    gitSha: z.string().openapi({ example: 'dev' }),
    releaseVersion: z.string().openapi({ example: 'dev' }),
    uptimeSec: z.int(),
    timestamp: z.string().openapi({ example: '2026-11-22T05:00:00.000Z' }),
  })
  .openapi('Health');

const getHealth = createRoute({
  operationId: 'getHealth',
  method: 'get',
  path: '/health',
  tags: ['Health'],
  summary: 'Liveness: answers without touching the database, Stripe or analytics',
  responses: { 200: jsonResponse(envelopeOf(healthRecord), 'The service is up') },
});

const getReady = createRoute({
  operationId: 'getReady',
  method: 'get',
  path: '/ready',
  tags: ['Health'],
  summary: 'Readiness: runs `select 1` on the database',
  responses: {
    200: jsonResponse(envelopeOf(z.object({ ready: z.boolean() })), 'The database answered'),
    ...errors(503),
  },
});

export function healthRoutes() {
  const router = newRouter();

  router.openapi(getHealth, (c) => {
    const { config, clock, startedAt } = c.var.deps;
    return c.json(ok(buildHealthRecord(config, startedAt, clock.now())), 200);
  });

  router.openapi(getReady, async (c) => {
    try {
      await withTimeout(sql`select 1`.execute(c.var.deps.database.db), 2000);
    } catch (err) {
      c.var.deps.logger.warn('readiness check failed', { requestId: c.var.requestId, err });
      throw new ApiError('UNAVAILABLE', 'The database is not reachable', { ready: false });
    }
    // The auth library initialises in the background at start (schema check, keys); every signed-in route
    // waits on it, so the service is not ready before it is, nor ever if it failed (a restart is then due).
    try {
      await withTimeout(c.var.deps.auth.$context, 2000);
    } catch (err) {
      c.var.deps.logger.error('readiness check failed: the auth library did not initialise', { requestId: c.var.requestId, err });
      throw new ApiError('UNAVAILABLE', 'The auth library is not initialised', { ready: false });
    }
    return c.json(ok({ ready: true }), 200);
  });

  return router;
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout>;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms))),
  ]).finally(() => clearTimeout(timer));
}
