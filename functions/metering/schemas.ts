import { z } from '@hono/zod-openapi';
import { oneLineName } from '../http/router.ts';

/**
 * Metering's request and response shapes. Handlers validate with these and the OpenAPI document is generated
 * from them. Amounts and limits are JSON numbers (counters stay far below 2^53).
 */

export const METRIC_KINDS = ['fixed', 'rolling'] as const;
export type MetricKind = (typeof METRIC_KINDS)[number];

/** Metric slugs: lowercase words joined by `-` or `_` (the same rule the table checks). */
export const metricSlugSchema = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[a-z0-9]+([_-][a-z0-9]+)*$/, 'slug must be lowercase letters and digits joined by single - or _')
  .openapi({ example: 'api-calls' });

/** Counter amounts: whole units, at least 1, at most a billion per call. */
const amountSchema = z.int().min(1).max(1_000_000_000);

export const metricDefinitionSchema = z
  .object({
    id: z.uuid(),
    agentId: z.uuid(),
    slug: z.string().openapi({ example: 'api-calls' }),
    name: z.string().openapi({ example: 'API calls' }),
    kind: z.enum(METRIC_KINDS).openapi({ description: '`rolling` resets every billing period; `fixed` never resets' }),
    unit: z.string().nullable().openapi({ example: 'call' }),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('MetricDefinition');
export type MetricDefinition = z.infer<typeof metricDefinitionSchema>;

export const createMetricDefinitionBody = z
  .object({
    slug: metricSlugSchema,
    name: oneLineName(120),
    kind: z.enum(METRIC_KINDS),
    unit: oneLineName(40).nullable().optional(),
  })
  .openapi('CreateMetricDefinition');

export const updateMetricDefinitionBody = z
  .object({
    name: oneLineName(120).optional(),
    unit: oneLineName(40).nullable().optional(),
    slug: z.string().optional().openapi({ description: 'Immutable: a different value is refused with 422 IMMUTABLE_FIELD' }),
    kind: z.string().optional().openapi({ description: 'Immutable: a different value is refused with 422 IMMUTABLE_FIELD' }),
  })
  .openapi('UpdateMetricDefinition');

export const tierQuotaSchema = z
  .object({
    tierId: z.uuid(),
    metricId: z.uuid(),
    metric: z.string().openapi({ description: 'The metric slug', example: 'api-calls' }),
    quotaLimit: z.int().nullable().openapi({ description: 'null = unlimited, 0 = deny' }),
    updatedAt: z.string(),
  })
  .openapi('TierQuota');
export type TierQuota = z.infer<typeof tierQuotaSchema>;

/**
 * The largest tier quota, 10^15 (a million billion units): JSON numbers are exact only to 2^53 - 1 (about 9 x 10^15),
 * and a user's limit is the quota plus the addons granted on it (up to 10^9 each), so a quota of 2^53 - 1 plus an
 * addon was answered by every usage read as a limit and a remaining that were not the counter's (review 77).
 */
export const MAX_QUOTA_LIMIT = 10 ** 15;

export const upsertTierQuotaBody = z
  .object({
    quotaLimit: z
      .int()
      .min(0)
      .max(MAX_QUOTA_LIMIT)
      .nullable()
      .openapi({ description: 'null = unlimited, 0 = deny; at most 10^15' }),
  })
  .openapi('UpsertTierQuota');

export const usageRecordSchema = z
  .object({
    metric: z.string().openapi({ example: 'api-calls' }),
    kind: z.enum(METRIC_KINDS),
    used: z.int(),
    reserved: z.int().openapi({ description: 'Units held by live reservations (held, not yet expired); they count against the quota' }),
    limit: z.int().nullable().openapi({ description: 'Effective quota (tier quota + active addons); null = unlimited' }),
    remaining: z.int().nullable().openapi({ description: 'limit - used - reserved (below 0 when the quota was lowered under the usage); null = unlimited' }),
    periodStart: z.string().openapi({
      description: 'rolling: start of the current billing period; fixed: start of the subscription (fixed metrics never reset)',
    }),
    periodEnd: z.string().nullable().openapi({ description: 'rolling: end of the current billing period; fixed: null' }),
  })
  .openapi('UsageRecord');
export type UsageRecord = z.infer<typeof usageRecordSchema>;

export const usageResultSchema = usageRecordSchema
  .extend({ replayed: z.boolean().openapi({ description: 'true when this clientReqId was seen before: the stored result, nothing changed' }) })
  .openapi('UsageResult');
export type UsageResult = z.infer<typeof usageResultSchema>;

export const incrementUsageBody = z
  .object({
    clientReqId: z
      .string()
      .min(1)
      .max(255)
      .openapi({ description: 'Idempotency key, unique per (subscription, metric)', example: 'req-7f3a' }),
    amount: amountSchema.optional().openapi({ description: 'Units to add, default 1' }),
  })
  .openapi('IncrementUsage');

export const decrementUsageBody = z
  .object({
    amount: amountSchema.optional().openapi({ description: 'Units to remove, default 1; the counter floors at 0' }),
    clientReqId: z.string().min(1).max(255).optional().openapi({ description: 'Optional idempotency key' }),
  })
  .openapi('DecrementUsage');

/** The request a reused clientReqId was first used for (409 IDEMPOTENCY_CONFLICT, `details.original`). */
export const originalRequestSchema = z
  .object({
    operation: z.enum(['increment', 'decrement', 'reserve', 'commit']),
    amount: z.int(),
    ttlSeconds: z.int().optional().openapi({ description: 'reserve only' }),
  })
  .openapi('OriginalRequest');
export type OriginalRequest = z.infer<typeof originalRequestSchema>;

export const RESERVATION_STATUSES = ['held', 'committed', 'released', 'expired'] as const;
export type ReservationStatus = (typeof RESERVATION_STATUSES)[number];

export const reservationSchema = z
  .object({
    id: z.uuid(),
    metric: z.string().openapi({ example: 'llm-tokens' }),
    status: z.enum(RESERVATION_STATUSES).openapi({
      description: '`held` counts against the quota until `expiresAt`; `committed`, `released` and `expired` are final',
    }),
    amount: z.int().openapi({ description: 'Units held' }),
    committedAmount: z.int().nullable().openapi({ description: 'Units counted as used by the commit; null unless committed' }),
    expiresAt: z.string().openapi({ description: 'A hold not committed or released by then frees its units by itself' }),
    createdAt: z.string(),
    usage: usageRecordSchema.openapi({ description: 'Usage of the metric on the counter the hold counts against, after this call' }),
  })
  .openapi('Reservation');
export type Reservation = z.infer<typeof reservationSchema>;

export const reserveUsageBody = z
  .object({
    clientReqId: z
      .string()
      .min(1)
      .max(255)
      .openapi({ description: 'Idempotency key, unique per (subscription, metric) across increments, decrements and reserves', example: 'job-81f2' }),
    amount: amountSchema.openapi({ description: 'Units to hold' }),
    ttlSeconds: z.int().min(1).max(3600).optional().openapi({ description: 'Seconds the hold lives unless committed or released; default 300' }),
  })
  .openapi('ReserveUsage');

export const commitReservationBody = z
  .object({
    amount: z.int().min(0).max(1_000_000_000).openapi({ description: 'Units actually used, 0..the held amount; the rest is freed' }),
  })
  .openapi('CommitReservation');

export const ADDON_DURATIONS = ['permanent', 'one_cycle'] as const;

export const addonSchema = z
  .object({
    id: z.uuid(),
    subscriptionId: z.uuid(),
    metricId: z.uuid(),
    metric: z.string().openapi({ description: 'The metric slug' }),
    amount: z.int(),
    duration: z.enum(ADDON_DURATIONS),
    periodStart: z
      .string()
      .nullable()
      .openapi({ description: 'one_cycle: start of the billing period it counts in; permanent: null' }),
    note: z.string().nullable(),
    status: z.enum(['active', 'revoked']),
    inEffect: z.boolean().openapi({ description: 'Counts toward the quota now (active, and for one_cycle: still in its period)' }),
    grantedBy: z.string().nullable(),
    revokedAt: z.string().nullable(),
    revokedBy: z.string().nullable(),
    createdAt: z.string(),
  })
  .openapi('Addon');
export type Addon = z.infer<typeof addonSchema>;

export const grantAddonBody = z
  .object({
    metricSlug: metricSlugSchema,
    amount: amountSchema,
    duration: z.enum(ADDON_DURATIONS),
    note: z.string().trim().max(1000).optional(),
  })
  .openapi('GrantAddon');

export const LEDGER_EVENTS = [
  'increment',
  'increment_denied',
  'decrement',
  'addon_granted',
  'addon_revoked',
  'quota_changed',
  'reserved',
  'reserve_denied',
  'committed',
  'released',
  'expired',
  // a counter carried into a new subscription from the user's previous one to the agent (migration 20261126000300)
  'carried_over',
] as const;

export const ledgerEntrySchema = z
  .object({
    id: z.uuid(),
    subscriptionId: z.uuid(),
    metricId: z.uuid(),
    metric: z.string(),
    event: z.enum(LEDGER_EVENTS),
    amount: z.int().nullable().openapi({
      description:
        'usage events: units asked for; reserved, reserve_denied, released, expired: the units held; committed: the units committed; ' +
        'addon events: the addon amount; quota_changed: the new tier quota (null = unlimited or removed, see details)',
    }),
    delta: z.int().openapi({ description: 'Change to the counter; the sum over a period equals its usage' }),
    used: z.int().nullable().openapi({ description: 'Counter after the event' }),
    limit: z.int().nullable().openapi({ description: 'Effective quota after the event; null = unlimited' }),
    periodStart: z.string().nullable(),
    periodEnd: z.string().nullable(),
    clientReqId: z.string().nullable(),
    addonId: z.uuid().nullable(),
    actorUserId: z.string().nullable(),
    details: z.record(z.string(), z.unknown()).openapi({
      description: 'reservation events: `reservationId` (and `ttlSeconds`, `expiresAt`, `held` where they apply)',
    }),
    createdAt: z.string(),
  })
  .openapi('LedgerEntry');
export type LedgerEntry = z.infer<typeof ledgerEntrySchema>;
