import type { BearerCheck, Principal } from '../http/context.ts';
import { ApiError, notFound } from '../http/errors.ts';
import { rateLimited } from '../http/rate-limit.ts';
import type { Clock } from '../platform/clock.ts';
import { first, sql, type Db } from '../platform/db.ts';
import type { OriginalRequest, Reservation, ReservationStatus } from './schemas.ts';
import { meterInBatch } from './group-commit.ts';
import { bearerCaller, idempotencyConflict, quotaExceeded, usageRecord, type BearerCallerColumns, type UsageColumns } from './usage.ts';
import { iso as isoOf } from '../platform/clock.ts';

/**
 * Usage reservations: hold units before an action whose cost is known only afterwards, then commit the actual
 * amount or release the hold (contract.md, Usage). Each call is ONE call of a SQL function (migration
 * 20261123000500): public.metering_reserve / public.metering_settle_reservation, or with a bearer token
 * public.metering_reservation_as_bearer, which runs the caller check in the same statement (and goes out in the
 * group commit's batches, group-commit.ts). A hold counts against
 * the quota under the same counter lock and the same rule as an increment; expiry needs no job (see the migration).
 * This module only maps the function's outcome to the API.
 */

export const DEFAULT_TTL_SECONDS = 300;

export type ReservationOperation = 'reserve' | 'commit' | 'release' | 'read';

export interface ReservationCall {
  agentId: string;
  /** reserve: the metric */
  metricSlug?: string | undefined;
  /** commit, release, read: the reservation */
  reservationId?: string | undefined;
  /** reserve: the idempotency key */
  clientReqId?: string | undefined;
  /** reserve: units to hold; commit: units used */
  amount?: number | undefined;
  /** reserve: 1..3600, default 300 */
  ttlSeconds?: number | undefined;
}

export interface ReservationResult {
  reservation: Reservation;
  /** true when nothing changed: a replay of the reserve, or a repeated commit or release */
  replayed: boolean;
}

interface ReservationRow extends UsageColumns {
  outcome:
    | 'ok'
    | 'quota_exceeded'
    | 'live_holds_limit'
    | 'subscription_required'
    | 'metric_not_found'
    | 'reservation_not_found'
    | 'idempotency_conflict'
    | 'expired'
    | 'invalid_state'
    | 'amount_over_hold';
  replayed: boolean;
  reservation_id: string | null;
  status: ReservationStatus | null;
  amount: number | null;
  committed_amount: number | null;
  expires_at: Date | string | null;
  created_at: Date | string | null;
  metric: string | null;
}

/** For a caller already authenticated (`userId`): one call of metering_reserve or metering_settle_reservation. */
export async function callReservation(
  db: Db,
  clock: Clock,
  { operation, userId, call }: { operation: ReservationOperation; userId: string; call: ReservationCall },
): Promise<ReservationResult> {
  const ttl = call.ttlSeconds ?? DEFAULT_TTL_SECONDS;
  const now = clock.now();
  const row =
    operation === 'reserve'
      ? await first<ReservationRow>(
          db,
          sql`select * from public.metering_reserve(
                p_user_id => ${userId}, p_agent_id => ${call.agentId}, p_metric_slug => ${call.metricSlug!},
                p_client_req_id => ${call.clientReqId!}, p_amount => ${call.amount!}, p_ttl_seconds => ${ttl}, p_now => ${now})`,
        )
      : await first<ReservationRow>(
          db,
          sql`select * from public.metering_settle_reservation(
                p_user_id => ${userId}, p_agent_id => ${call.agentId}, p_reservation_id => ${call.reservationId!},
                p_action => ${operation}, p_amount => ${call.amount ?? null}, p_now => ${now})`,
        );
  return reservationOutcome(row!, operation, call, now);
}

/**
 * The same for a bearer token verified in process but not yet checked against the database: the caller check
 * (user, revocation, ban, the token's client belongs to the path agent) and the reservation call run in ONE
 * statement. A live caller whose token is not the path agent's own gets 403 and nothing was done.
 */
export async function callReservationAsBearer(
  db: Db,
  clock: Clock,
  { operation, check, call }: { operation: ReservationOperation; check: BearerCheck; call: ReservationCall },
): Promise<{ principal: Principal; result: ReservationResult }> {
  const now = clock.now();
  // through the group commit, with the increments and decrements: one statement and one commit for all the calls that
  // arrived together (the batch runs public.metering_reservation_as_bearer for this call)
  const row = (await meterInBatch(db, {
    ...call,
    operation,
    check,
    ttlSeconds: operation === 'reserve' ? (call.ttlSeconds ?? DEFAULT_TTL_SECONDS) : undefined,
    now,
  })) as unknown as ReservationRow & BearerCallerColumns;
  const principal = bearerCaller(check, row);
  return { principal, result: reservationOutcome(row, operation, call, now) };
}

function reservationOutcome(row: ReservationRow, operation: ReservationOperation, call: ReservationCall, now: Date): ReservationResult {
  switch (row.outcome) {
    case 'ok':
      return { reservation: toReservation(row), replayed: row.replayed };
    case 'quota_exceeded':
      throw quotaExceeded(usageRecord({ ...row, metric: row.metric! }), Number(row.requested ?? call.amount), row.replayed, now);
    case 'live_holds_limit':
      throw liveHoldsLimit(row, now);
    case 'subscription_required':
      throw new ApiError('SUBSCRIPTION_REQUIRED', 'An active subscription to this agent is required', { agentId: call.agentId });
    case 'metric_not_found':
      throw notFound('Metric', { agentId: call.agentId, metricSlug: call.metricSlug });
    case 'reservation_not_found':
      throw notFound('Reservation', { agentId: call.agentId, reservationId: call.reservationId });
    case 'idempotency_conflict': {
      const request: OriginalRequest =
        operation === 'reserve'
          ? { operation: 'reserve', amount: call.amount!, ttlSeconds: call.ttlSeconds ?? DEFAULT_TTL_SECONDS }
          : { operation: 'commit', amount: call.amount! };
      if (operation === 'reserve') throw idempotencyConflict({ metric: call.metricSlug, clientReqId: call.clientReqId, original: row.original!, request });
      throw idempotencyConflict({ metric: row.metric ?? undefined, original: row.original!, request, extra: { reservation: toReservation(row) } });
    }
    case 'expired':
      throw new ApiError(
        'INVALID_STATE',
        `This reservation expired at ${iso(row.expires_at)}: its units were freed and it can no longer be ${operation === 'commit' ? 'committed' : 'released'}`,
        { reservation: toReservation(row) },
      );
    case 'invalid_state':
      throw new ApiError('INVALID_STATE', `This reservation is ${row.status}; it can no longer be ${operation === 'commit' ? 'committed' : 'released'}`, {
        reservation: toReservation(row),
      });
    case 'amount_over_hold':
      throw new ApiError('VALIDATION_ERROR', 'The request is not valid', {
        issues: [{ path: 'amount', message: `must be at most the held amount (${Number(row.amount)})` }],
        reservation: toReservation(row),
      });
  }
}

/**
 * 429 RATE_LIMITED: the counter already has the most live holds it may have (1,000, migration 20261126002100:
 * every quota check of a counter reads its live holds, so their number is bounded). Nothing was held or recorded, so
 * the same request, with the same clientReqId, may pass once a hold of the counter expires (`Retry-After`: the
 * oldest one's expiry, at least 1 s) or is committed or released. The row carries the limit in `amount` and the
 * oldest live hold's expiry in `expires_at`.
 */
function liveHoldsLimit(row: ReservationRow, now: Date): ApiError {
  const maxLiveHolds = Number(row.amount);
  const oldest = row.expires_at === null ? null : isoOf(row.expires_at);
  const retryAfterSec = Math.max(1, oldest === null ? 1 : Math.ceil((Date.parse(oldest) - now.getTime()) / 1000));
  return rateLimited(
    retryAfterSec,
    `${row.metric} already has ${maxLiveHolds} live holds for this subscription, the most one counter may have; nothing was held. ` +
      `Commit or release holds that are done, or retry after ${retryAfterSec} s, when the oldest one expires (the same clientReqId may be sent again).`,
    { maxLiveHolds, metric: row.metric, oldestHoldExpiresAt: oldest },
  );
}

const iso = (v: Date | string | null) => isoOf(v!);

function toReservation(row: ReservationRow): Reservation {
  return {
    id: row.reservation_id!,
    metric: row.metric!,
    status: row.status!,
    amount: Number(row.amount),
    committedAmount: row.committed_amount === null ? null : Number(row.committed_amount),
    expiresAt: iso(row.expires_at),
    createdAt: iso(row.created_at),
    usage: usageRecord({ ...row, metric: row.metric! }),
  };
}
