import { createRoute, z } from '@hono/zod-openapi';
import { envelopeOf, ok } from '../http/envelope.ts';
import { ApiError } from '../http/errors.ts';
import { errors, jsonResponse, newRouter } from '../http/router.ts';
import { batchSizes } from '../metering/index.ts';
import { BACKGROUND_PARTS, DEFAULT_DRAIN_LIMIT, isDrainToken, runBackgroundWork, type CompletedBackgroundWork } from './background-work.ts';

/**
 * POST /internal/drain: the background work for a scheduler (pg_cron through pg_net on Supabase, or any cron that can
 * send an HTTP request). Not part of the marketplace's API for users: the caller proves it is the scheduler with
 * `Authorization: Bearer <DRAIN_TOKEN>` (compared in constant time; the token is never logged: the request log keeps
 * no headers and the logger redacts bearer credentials anywhere). Without DRAIN_TOKEN the endpoint does not exist
 * (404), so a deployment that schedules its work otherwise exposes nothing.
 */

const drainBody = z
  .object({
    limit: z
      .int()
      .min(1)
      .max(1000)
      .optional()
      .openapi({ description: `At most this many mails and this many webhook attempts in this call (default ${DEFAULT_DRAIN_LIMIT})` }),
  })
  .strict()
  .openapi('DrainRequest');

const drainReport = z
  .object({
    housekeeping: z.object({
      revokedTokensPruned: z.int(),
      rateLimitsPruned: z.int(),
      reservationsExpired: z.int(),
      mailPruned: z.int().openapi({ description: 'mails done (sent, logged or failed for good) more than 7 days ago, deleted' }),
      webhookDeliveriesPruned: z
        .int()
        .openapi({ description: 'agent-webhook deliveries done (delivered or failed) more than 30 days ago, deleted with their attempts' }),
      webhookEventsPruned: z
        .int()
        .openapi({ description: 'agent-webhook events more than 30 days old that no delivery refers to any more, deleted' }),
      sessionsPruned: z
        .int()
        .openapi({ description: 'expired sign-in sessions, deleted (the access tokens bound to them stop working, as after a sign-out)' }),
      verificationsPruned: z
        .int()
        .openapi({ description: 'expired verification links, password-reset tokens and authorization codes, deleted' }),
      refreshTokensPruned: z.int().openapi({ description: 'expired OAuth refresh tokens, deleted' }),
      checkoutSessionsPruned: z.int().openapi({ description: 'records of Checkout Sessions made more than 30 days ago, deleted' }),
    }),
    mail: z.object({ handled: z.int().openapi({ description: 'mails sent, logged or rescheduled after a failed attempt' }) }),
    webhooks: z.object({ attempted: z.int(), delivered: z.int(), retrying: z.int(), failed: z.int() }),
    purchases: z
      .object({
        abandoned: z.int().openapi({ description: 'anonymous purchases nobody claimed, given up: their claim links refused from now on' }),
        undone: z.int().openapi({ description: 'given-up purchases refunded in full, canceled at Stripe and their address mailed' }),
      })
      .openapi({ description: 'Anonymous purchases whose claim link was not used within 7 days after it expired (docs/billing.md, "Claims")' }),
    deletedAgents: z
      .object({
        renewalsStopped: z
          .int()
          .openapi({ description: "paid subscriptions of deleted agents set to end at their period's end (ended now when not paid up), their users mailed" }),
        renewalsResumed: z.int().openapi({ description: 'subscriptions of agents active again renewing again, their users mailed' }),
        failed: z.int().openapi({ description: 'ones Stripe or the database refused this round (logged; a later round tries again)' }),
      })
      .openapi({ description: 'Paid subscriptions of agents an admin deleted (docs/billing.md, "Deleted agents")' }),
    overdueSubscriptions: z
      .object({
        reread: z.int().openapi({ description: 'live paid subscriptions whose period ended a day ago or more, read again from Stripe and written' }),
        failed: z.int().openapi({ description: 'ones Stripe or the database refused this round (logged; read again after 6 hours)' }),
      })
      .openapi({ description: 'Paid subscriptions overdue for a Stripe event (docs/billing.md, "Events that never came")' }),
    failed: z
      .array(z.enum(BACKGROUND_PARTS))
      .openapi({ description: 'Parts that failed: always empty in a 200 (a call where one failed answers 503, the report in `details.report`)' }),
    durationMs: z.int(),
  })
  .openapi('DrainReport');

const drainRoute = createRoute({
  operationId: 'drainBackgroundWork',
  method: 'post',
  path: '/internal/drain',
  tags: ['Internal'],
  summary:
    "For the scheduler: runs one bounded batch of background work (housekeeping, mail and webhook outboxes, unclaimed purchases, deleted agents' renewals, overdue paid subscriptions)",
  description:
    'Authorization: `Bearer <DRAIN_TOKEN>`. Safe to call at any rate and from any number of callers at once: mails, ' +
    'webhook deliveries and unclaimed purchases to undo are claimed with FOR UPDATE SKIP LOCKED, so none is sent or ' +
    'undone twice by concurrent calls. The body ' +
    'may be absent or `{}`; `limit` bounds the batch. 404 when DRAIN_TOKEN is not configured. The parts run side by ' +
    'side, each on its own: when one fails (logged with its name), the others still run, and the call answers 503 ' +
    'UNAVAILABLE with `details.reason` "part_failed", `details.failed` (the parts that failed) and `details.report` ' +
    '(this report, null for each failed part); drained again later, nothing is done twice.',
  security: [{ bearer: [] }],
  request: { body: { required: false, content: { 'application/json': { schema: drainBody } } } },
  responses: {
    200: jsonResponse(envelopeOf(drainReport), 'What this call did'),
    ...errors(400, 401, 404, 503),
  },
});

const batchReport = z
  .object({
    batches: z
      .array(z.object({ size: z.int().openapi({ description: 'calls in one batch' }), count: z.int().openapi({ description: 'batches of that size' }) }))
      .openapi({ description: 'Smallest size first; only sizes that occurred' }),
    batchCount: z.int(),
    callCount: z.int(),
  })
  .openapi('MeteringBatchReport');

const batchesRoute = createRoute({
  operationId: 'getMeteringBatches',
  method: 'get',
  path: '/internal/metering/batches',
  tags: ['Internal'],
  summary: "For operators and the benchmark: this instance's group-commit batch sizes since it started",
  description:
    'Authorization: `Bearer <DRAIN_TOKEN>`. Usage writes (increments, decrements) that arrive while a batch is in flight ' +
    'go out together as the next one (functions/metering/group-commit.ts); this histogram shows how far that coalescing ' +
    'goes under the real load. Per process: each instance counts its own. 404 when DRAIN_TOKEN is not configured.',
  security: [{ bearer: [] }],
  responses: {
    200: jsonResponse(envelopeOf(batchReport), 'Batch sizes of this instance'),
    ...errors(401, 404),
  },
});

export function internalRoutes() {
  const router = newRouter();

  // Before the body is validated: an unauthenticated caller learns nothing but 401 (or 404 when the routes are off).
  router.use('/internal/*', async (c, next) => {
    const expected = c.var.deps.config.drainToken;
    if (!expected) throw new ApiError('NOT_FOUND', `No route for ${c.req.method} ${c.req.path}`);
    const presented = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header('authorization') ?? '')?.[1];
    if (!presented || !(await isDrainToken(presented, expected))) {
      throw new ApiError('UNAUTHORIZED', `${c.req.method} ${c.req.path} needs Authorization: Bearer <DRAIN_TOKEN>`);
    }
    await next();
  });

  router.openapi(batchesRoute, (c) => {
    const batches = [...batchSizes(c.var.deps.database.db)].sort(([a], [b]) => a - b).map(([size, count]) => ({ size, count }));
    const batchCount = batches.reduce((n, b) => n + b.count, 0);
    const callCount = batches.reduce((n, b) => n + b.size * b.count, 0);
    return c.json(ok({ batches, batchCount, callCount }), 200);
  });

  router.openapi(drainRoute, async (c) => {
    // Authenticated by the middleware above (the scheduler's shared token), not a user route.
    const body = c.req.valid('json') as z.infer<typeof drainBody> | undefined;
    const report = await runBackgroundWork(c.var.deps, { limit: body?.limit });
    const { failed } = report;
    if (failed.length > 0) {
      // Review 25: one part's failure no longer fails the others; the scheduler still sees a call that did not do
      // everything (503), and the log line says which part (runBackgroundWork logged its error).
      c.var.deps.logger.warn('background work drained, but not all of it', { requestId: c.var.requestId, ...report });
      throw new ApiError(
        'UNAVAILABLE',
        `Part of the background work failed (${failed.join(', ')}; logged); the other parts ran: details.report says what they did`,
        { reason: 'part_failed', failed, report },
        { 'Retry-After': '1' },
      );
    }
    // No part failed: each one's report is there.
    const done = report as typeof report & CompletedBackgroundWork;
    const { mail, webhooks, purchases } = done;
    if (mail.handled > 0 || webhooks.attempted > 0 || purchases.abandoned > 0 || purchases.undone > 0) {
      c.var.deps.logger.info('background work drained', { requestId: c.var.requestId, ...report });
    }
    return c.json(ok(done), 200);
  });

  return router;
}
