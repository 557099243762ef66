import { z } from '@hono/zod-openapi';
import { errors, rateLimitedSchema } from '../../http/router.ts';

/**
 * What every usage write answers besides its body, for the OpenAPI document: the quota headers (declared on every
 * usage response, the 429 included) and the 429 QUOTA_EXCEEDED, which is its own schema so that a client can tell
 * it from the RATE_LIMITED 429 of other routes. Usage writes are not rate limited, except one bound: a reserve on a
 * counter that already has 1,000 live holds answers 429 RATE_LIMITED (`reserve429`).
 */

export const quotaHeaderDocs = {
  'X-Quota-Limit': { description: 'Effective quota (tier quota + active addons), or `unlimited`', schema: { type: 'string' as const } },
  'X-Quota-Remaining': { description: 'Units left (limit - used - reserved), or `unlimited`', schema: { type: 'string' as const } },
  'X-Idempotent-Replay': {
    description:
      'Present (`true`) when this call changed nothing because an earlier one did it: an increment or decrement with the same ' +
      'clientReqId answers that call\'s stored result (its X-Quota-* figures are the ones it saw); a reserve with the same ' +
      'clientReqId, a repeated commit or a repeated release answer the reservation as it is now, and the X-Quota-* figures are ' +
      'the counter now (review 90)',
    schema: { type: 'string' as const, enum: ['true'] },
  },
};

const quotaExceededSchema = z
  .object({
    status: z.literal('error'),
    data: z.null(),
    error: z.object({
      code: z.literal('QUOTA_EXCEEDED'),
      message: z.string(),
      details: z.object({
        metric: z.string(),
        used: z.int(),
        reserved: z.int().openapi({ description: 'Units held by live reservations' }),
        limit: z.int().nullable(),
        requested: z.int(),
        periodEnd: z.iso.datetime().nullable().openapi({ description: 'When a rolling quota resets; null for a fixed metric (it never resets by itself)' }),
        replayed: z.boolean().openapi({ description: 'This 429 is the stored result of an earlier call with the same clientReqId' }),
      }),
    }),
  })
  .openapi('QuotaExceededError');

export const quotaExceeded429 = {
  429: {
    description:
      'QUOTA_EXCEEDED: the call would pass the effective quota; nothing was counted. `Retry-After` (seconds) is set when the quota ' +
      'resets at a known time (rolling metrics: `details.periodEnd`); a fixed metric has none. Do not retry with the same clientReqId: ' +
      'it replays this answer',
    headers: {
      ...quotaHeaderDocs,
      'Retry-After': { description: 'Seconds until the quota period ends (rolling metrics only)', schema: { type: 'string' as const } },
    },
    content: { 'application/json': { schema: quotaExceededSchema } },
  },
};

/**
 * The reserve's 429: QUOTA_EXCEEDED as above, or RATE_LIMITED when the counter already has 1,000 live holds
 * (migration 20261126002100): either schema (QuotaExceededError or the RateLimitedError of other routes), told apart
 * by `error.code`, so a generated client reads both.
 */
export const reserve429 = {
  429: {
    ...quotaExceeded429[429],
    description:
      quotaExceeded429[429].description +
      '. Or RATE_LIMITED (`error.code`, the RateLimitedError body) when this counter already has 1,000 live holds, the most one ' +
      'counter may have: nothing was held or recorded, `details` is `{ maxLiveHolds, metric, oldestHoldExpiresAt, retryAfterSec }` and ' +
      '`Retry-After` the seconds until its oldest live hold expires; commit or release finished holds, or retry then (the same ' +
      'clientReqId may be sent again: this answer is not replayed)',
    headers: {
      ...quotaExceeded429[429].headers,
      'Retry-After': {
        description: 'QUOTA_EXCEEDED: seconds until the quota period ends (rolling metrics only); RATE_LIMITED: seconds until the oldest live hold expires',
        schema: { type: 'string' as const },
      },
    },
    content: { 'application/json': { schema: z.union([quotaExceededSchema, rateLimitedSchema]) } },
  },
};

/** 409 IDEMPOTENCY_CONFLICT, as every usage write documents it. */
export const idempotencyConflict409 = (what: string) => ({ 409: { ...errors(409)[409], description: `IDEMPOTENCY_CONFLICT: ${what}` } });
