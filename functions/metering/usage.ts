import { findActiveSubscription } from '../billing/index.ts';
import type { BearerCheck, Principal } from '../http/context.ts';
import { ApiError, notFound } from '../http/errors.ts';
import { otherAgent } from '../http/access.ts';
import { meterInBatch } from './group-commit.ts';
import type { Clock } from '../platform/clock.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { MetricKind, OriginalRequest, UsageRecord, UsageResult } from './schemas.ts';

/**
 * Usage of a subscription's metrics: the check-and-increment hot path, decrement, and reads.
 * Increment and decrement are each ONE call of a SQL function (current versions in migration 20261123000500, which
 * counts live reservations against the quota and answers a reused clientReqId of another request as a conflict), one
 * round trip and one transaction: subscription, metric, idempotency record, counter and ledger row commit together or
 * not at all; with a bearer token the caller check rides in the same statement (public.metering_call_as_bearer).
 * This module only maps the function's outcome to the API.
 */

/** The counter's columns that every usage call returns (increments, decrements, reservations): a usage record. */
export interface UsageColumns {
  kind: MetricKind | null;
  used: number | null;
  /** units held by live reservations on the counter (on a replay: as the first call saw them) */
  reserved: number | null;
  quota_limit: number | null;
  period_start: Date | string | null;
  period_end: Date | string | null;
  /** units the recorded call asked for (on a replay: the first call's) */
  requested: number | null;
  /** idempotency_conflict: the request this clientReqId was first used for */
  original: OriginalRequest | null;
}

interface UsageCallRow extends UsageColumns {
  outcome: 'ok' | 'quota_exceeded' | 'subscription_required' | 'metric_not_found' | 'not_decrementable' | 'idempotency_conflict';
  replayed: boolean;
}

export interface UsageCall {
  userId: string;
  agentId: string;
  metricSlug: string;
  clientReqId: string | undefined;
  amount: number;
}

export type UsageOperation = 'increment' | 'decrement';

/**
 * Increment (check-and-increment) or decrement, for a caller already authenticated (`userId`), in one call of
 * public.metering_increment / public.metering_decrement.
 */
export async function meterUsage(db: Db, clock: Clock, operation: UsageOperation, call: UsageCall): Promise<UsageResult> {
  const fn = operation === 'increment' ? sql`public.metering_increment` : sql`public.metering_decrement`;
  const row = await first<UsageCallRow>(
    db,
    sql`select * from ${fn}(${call.userId}, ${call.agentId}, ${call.metricSlug}, ${call.clientReqId ?? null}, ${call.amount}, ${clock.now()})`,
  );
  return usageOutcome(row!, call, operation, clock.now());
}

/**
 * The same, for a bearer token verified in process but not yet checked against the database: the caller check
 * (public.bearer_caller) and the usage call run in ONE statement (public.metering_call_as_bearer), so the agent
 * backends' hot path costs one round trip. Returns the principal (for the request log) with the result; a
 * refused caller is the same 401 as on every other route, and nothing was counted.
 */
export async function meterUsageAsBearer(
  db: Db,
  clock: Clock,
  { operation, check, call }: { operation: UsageOperation; check: BearerCheck; call: Omit<UsageCall, 'userId'> },
): Promise<{ principal: Principal; result: UsageResult }> {
  // Through group commit: concurrent calls share one statement, one transaction and one commit (group-commit.ts).
  const now = clock.now();
  const row = (await meterInBatch(db, { ...call, operation, check, now })) as unknown as UsageCallRow & BearerCallerColumns;
  const principal = bearerCaller(check, row);
  return { principal, result: usageOutcome(row, { ...call, userId: check.userId }, operation, now) };
}

/** The columns public.bearer_caller adds to a bearer usage statement (metering_batch_as_bearer, ..._as_bearer). */
export interface BearerCallerColumns {
  caller_status: string;
  caller_email: string | null;
  caller_name: string | null;
  caller_role: string | null;
  caller_created_at: Date | string | null;
}

/**
 * The caller of a bearer usage statement, from the caller check's columns: 403 when the token is live but not the
 * path agent's own (the statement did nothing then), otherwise the principal (401 for a refused token).
 */
export function bearerCaller(check: BearerCheck, row: BearerCallerColumns): Principal {
  if (row.caller_status === 'other_agent') throw otherAgent();
  return check.principal({
    status: row.caller_status,
    email: row.caller_email,
    name: row.caller_name,
    role: row.caller_role,
    createdAt: row.caller_created_at,
  });
}

function usageOutcome(row: UsageCallRow, call: UsageCall, operation: UsageOperation, now: Date): UsageResult {
  switch (row.outcome) {
    case 'ok':
      return { ...usageRecord({ ...row, metric: call.metricSlug }), replayed: row.replayed };
    case 'quota_exceeded':
      throw quotaExceeded(usageRecord({ ...row, metric: call.metricSlug }), Number(row.requested ?? call.amount), row.replayed, now);
    case 'subscription_required':
      throw new ApiError('SUBSCRIPTION_REQUIRED', 'An active subscription to this agent is required', { agentId: call.agentId });
    case 'metric_not_found':
      throw notFound('Metric', { agentId: call.agentId, metricSlug: call.metricSlug });
    case 'not_decrementable':
      throw new ApiError('NOT_DECREMENTABLE', 'Only fixed metrics can be decremented; rolling metrics reset each billing period', {
        metric: call.metricSlug,
        kind: row.kind,
      });
    case 'idempotency_conflict':
      throw idempotencyConflict({
        metric: call.metricSlug,
        clientReqId: call.clientReqId,
        original: row.original!,
        request: { operation, amount: call.amount },
      });
  }
}

/**
 * 409 IDEMPOTENCY_CONFLICT: a clientReqId (or, for a commit, a reservation) already stands for another request.
 * Nothing was changed; `details.original` is the first request, so the caller can tell a retry bug from a reuse.
 */
export function idempotencyConflict({
  metric,
  clientReqId,
  original,
  request,
  extra = {},
}: {
  metric: string | undefined;
  /** Absent for a settled reservation (its id is the key). */
  clientReqId?: string | undefined;
  original: OriginalRequest;
  request: OriginalRequest;
  extra?: Record<string, unknown>;
}): ApiError {
  const what = clientReqId === undefined ? 'This reservation was already settled' : `This clientReqId was already used`;
  return new ApiError(
    'IDEMPOTENCY_CONFLICT',
    `${what} for ${describeRequest(original)}; this request is ${describeRequest(request)}. ` +
      (clientReqId === undefined ? 'Nothing was changed.' : 'Nothing was changed; use a new clientReqId for a new request.'),
    { ...(metric ? { metric } : {}), ...(clientReqId !== undefined ? { clientReqId } : {}), original, request, ...extra },
  );
}

const describeRequest = (r: OriginalRequest) =>
  `${r.operation} of ${r.amount}${r.ttlSeconds !== undefined ? ` for ${r.ttlSeconds}s` : ''}`;

export function usageRecord(row: Omit<UsageColumns, 'requested' | 'original'> & { metric: string }): UsageRecord {
  const used = Number(row.used ?? 0);
  const reserved = Number(row.reserved ?? 0);
  const limit = row.quota_limit === null ? null : Number(row.quota_limit);
  return {
    metric: row.metric,
    kind: row.kind!,
    used,
    reserved,
    limit,
    // contract.md's formula as it stands: below 0 when a quota was lowered under what is already used or held
    remaining: limit === null ? null : limit - used - reserved,
    periodStart: new Date(row.period_start!).toISOString(),
    periodEnd: row.kind === 'rolling' && row.period_end ? new Date(row.period_end).toISOString() : null,
  };
}

/**
 * X-Quota-Limit / X-Quota-Remaining: numbers, or `unlimited`. On a replay they are the stored result's figures (as
 * the first call saw them, not the counter now), and `X-Idempotent-Replay: true` says so.
 */
export function quotaHeaders(record: UsageRecord, replayed = false): Record<string, string> {
  return {
    'X-Quota-Limit': record.limit === null ? 'unlimited' : String(record.limit),
    'X-Quota-Remaining': record.remaining === null ? 'unlimited' : String(record.remaining),
    ...(replayed ? { 'X-Idempotent-Replay': 'true' } : {}),
  };
}

/**
 * 429 QUOTA_EXCEEDED (an increment or a hold would pass the effective quota), for increments and reservations alike.
 * It says when trying again can help: a rolling metric resets at `periodEnd`, so `Retry-After` counts the seconds
 * to it; a fixed metric never resets by itself (no `Retry-After`; only a decrement, an addon or a bigger tier
 * frees units). Generic retry middleware must not retry it blindly: the same clientReqId replays this answer.
 */
export function quotaExceeded(record: UsageRecord, requested: number, replayed: boolean, now: Date): ApiError {
  const headers = quotaHeaders(record, replayed);
  const untilReset = record.periodEnd === null ? 0 : Math.ceil((Date.parse(record.periodEnd) - now.getTime()) / 1000);
  if (untilReset > 0) headers['Retry-After'] = String(untilReset);
  const when =
    record.periodEnd === null
      ? 'This metric does not reset by itself: free units (decrement), add an addon or move to a bigger tier.'
      : `The quota resets at ${record.periodEnd}; retry then with a new clientReqId.`;
  return new ApiError(
    'QUOTA_EXCEEDED',
    `Quota exceeded for ${record.metric}: ${record.used} of ${record.limit} used, ${record.reserved} reserved, ${requested} requested. ${when}`,
    // on a replay this is the stored result of the first call with this clientReqId
    { metric: record.metric, used: record.used, reserved: record.reserved, limit: record.limit, requested, periodEnd: record.periodEnd, replayed },
    headers,
  );
}

interface UsageRow {
  metric_id: string;
  metric: string;
  kind: MetricKind;
  used: number;
  reserved: number;
  quota_limit: number | null;
  period_start: Date | string;
  period_end: Date | string | null;
}

/** Usage of every metric of the subscription's agent at the clock's now, by metric slug. */
export async function subscriptionUsage(db: Db, clock: Clock, subscriptionId: string): Promise<UsageRecord[]> {
  const found = await rows<UsageRow>(db, sql`select * from public.metering_usage(${subscriptionId}, ${clock.now()})`);
  return found.map(usageRecord);
}

/** The admin read: 404 for an unknown subscription (any status is readable). */
export async function getSubscriptionUsage(db: Db, clock: Clock, subscriptionId: string): Promise<UsageRecord[]> {
  const exists = await first(db, sql`select 1 from public.subscriptions where id = ${subscriptionId}`);
  if (!exists) throw notFound('Subscription', { subscriptionId });
  return subscriptionUsage(db, clock, subscriptionId);
}

/** The caller's usage on an agent; 404 without an active subscription to it. */
export async function listMyUsage(db: Db, clock: Clock, userId: string, agentId: string): Promise<UsageRecord[]> {
  const subscription = await findActiveSubscription(db, clock, userId, agentId);
  if (!subscription) throw notFound('Active subscription', { agentId });
  return subscriptionUsage(db, clock, subscription.id);
}

export async function getMyUsage(
  db: Db,
  clock: Clock,
  { userId, agentId, metricSlug }: { userId: string; agentId: string; metricSlug: string },
): Promise<UsageRecord> {
  const usage = await listMyUsage(db, clock, userId, agentId);
  const record = usage.find((u) => u.metric === metricSlug);
  if (!record) throw notFound('Metric', { agentId, metricSlug });
  return record;
}
