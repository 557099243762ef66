import type { BearerCheck } from '../http/context.ts';
import { isConnectionLost, isTransientConflict, rows, sql, type Db } from '../platform/db.ts';

/**
 * Group commit of the agent backends' usage writes and reservations (issue 16; migrations 20261123000800 and
 * 20261125000300).
 *
 * Calls that arrive while a batch is in flight wait for it and then go out together as the next batch: ONE call of
 * public.metering_batch_as_bearer, one transaction, one commit, one round trip. No timers: when fewer than
 * `MAX_IN_FLIGHT` batches are out, a call leaves at once (a lone call waits for nothing); under load the batches grow
 * by themselves, and so does the number of calls per commit. Each call keeps exactly its own semantics (the SQL
 * function runs the per-call function for each, in a global lock order).
 *
 * Failures: a batch that PostgreSQL ended to be run again (a deadlock, or a call whose subscription was continued
 * by a new one meanwhile: 40001, migration 20261126000500) is sent again as it was, up to `ATTEMPTS` times. If a
 * batch fails as a whole otherwise (a bug or a constraint nobody expected), its calls are retried one by one, so one
 * bad call never fails the others; every call carries its clientReqId, so a retry never counts twice. A lost
 * connection fails every call of the batch with that error (503 UNAVAILABLE with Retry-After to each caller).
 */

/**
 * One usage write, as public.metering_call_as_bearer (increment, decrement) or public.metering_reservation_as_bearer
 * (reserve, commit, release, read) takes it.
 */
export interface BatchedCall {
  operation: 'increment' | 'decrement' | 'reserve' | 'commit' | 'release' | 'read';
  check: BearerCheck;
  agentId: string;
  /** increment, decrement, reserve */
  metricSlug?: string | undefined;
  /** increment, decrement (optional), reserve */
  clientReqId?: string | undefined;
  /** increment, decrement, reserve, commit */
  amount?: number | undefined;
  /** commit, release, read */
  reservationId?: string | undefined;
  /** reserve */
  ttlSeconds?: number | undefined;
  now: Date;
}

/** A row of the batch: the caller columns and the call's outcome (a reservation call also fills its own columns). */
export type CallRow = Record<string, unknown> & { caller_status: string };

/** Batches in flight at once per database: the next batch fills while one executes and another commits. */
const MAX_IN_FLIGHT = 2;
/** An upper bound on one statement's arrays; more calls wait for the next batch. */
const MAX_BATCH = 500;
/** Sends of one batch that PostgreSQL ended to be run again (40001, 40P01), the first included. */
const ATTEMPTS = 3;

interface Pending {
  call: BatchedCall;
  resolve: (row: CallRow) => void;
  reject: (err: unknown) => void;
}

/** How many batches of each size went out (size -> count): what the benchmark prints. */
export type BatchSizes = Map<number, number>;

class UsageBatcher {
  #queue: Pending[] = [];
  #inFlight = 0;
  readonly sizes: BatchSizes = new Map();
  readonly #db: Db;

  constructor(db: Db) {
    this.#db = db;
  }

  submit(call: BatchedCall): Promise<CallRow> {
    return new Promise<CallRow>((resolve, reject) => {
      this.#queue.push({ call, resolve, reject });
      this.#pump();
    });
  }

  #pump(): void {
    while (this.#inFlight < MAX_IN_FLIGHT && this.#queue.length > 0) {
      const batch = this.#queue.splice(0, MAX_BATCH);
      this.sizes.set(batch.length, (this.sizes.get(batch.length) ?? 0) + 1);
      this.#inFlight++;
      void this.#run(batch).finally(() => {
        this.#inFlight--;
        this.#pump();
      });
    }
  }

  async #run(batch: Pending[]): Promise<void> {
    let results: CallRow[];
    try {
      results = await runAgain(this.#db, batch.map((p) => p.call));
    } catch (err) {
      if (isConnectionLost(err) || batch.length === 1) {
        for (const p of batch) p.reject(err);
        return;
      }
      // The batch failed as a whole: one call at a time, so only a bad call fails (its own clientReqId keeps the
      // others from counting twice, and the failed transaction wrote nothing).
      await Promise.all(
        batch.map((p) =>
          runAgain(this.#db, [p.call]).then(
            ([row]) => p.resolve(row!),
            (e) => p.reject(e),
          ),
        ),
      );
      return;
    }
    batch.forEach((p, i) => p.resolve(results[i]!));
  }
}

/** runBatch, sent again while PostgreSQL ends it to be run again (each attempt is its own transaction). */
async function runAgain(db: Db, calls: BatchedCall[]): Promise<CallRow[]> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await runBatch(db, calls);
    } catch (err) {
      if (attempt >= ATTEMPTS || !isTransientConflict(err)) throw err;
    }
  }
}

async function runBatch(db: Db, calls: BatchedCall[]): Promise<CallRow[]> {
  const found = await rows<CallRow & { call_index: number }>(
    db,
    sql`select * from public.metering_batch_as_bearer(
          p_operations => ${calls.map((c) => c.operation)}::text[],
          p_user_ids => ${calls.map((c) => c.check.userId)}::text[],
          p_token_keys => ${calls.map((c) => c.check.tokenKeys.join(' '))}::text[],
          p_issued_ats => ${calls.map((c) => c.check.issuedAt.toISOString())}::text[]::timestamptz[],
          p_client_ids => ${calls.map((c) => c.check.clientId)}::text[],
          p_token_agent_ids => ${calls.map((c) => c.check.agentId)}::text[]::uuid[],
          p_agent_ids => ${calls.map((c) => c.agentId)}::text[]::uuid[],
          p_metric_slugs => ${calls.map((c) => c.metricSlug ?? null)}::text[],
          p_client_req_ids => ${calls.map((c) => c.clientReqId ?? null)}::text[],
          p_amounts => ${calls.map((c) => (c.amount === undefined ? null : String(c.amount)))}::text[]::bigint[],
          p_nows => ${calls.map((c) => c.now.toISOString())}::text[]::timestamptz[],
          p_reservation_ids => ${calls.map((c) => c.reservationId ?? null)}::text[]::uuid[],
          p_ttl_seconds => ${calls.map((c) => (c.ttlSeconds === undefined ? null : String(c.ttlSeconds)))}::text[]::integer[])`,
  );
  const byIndex: CallRow[] = new Array(calls.length);
  for (const row of found) byIndex[Number(row.call_index) - 1] = row;
  return byIndex;
}

const batchers = new WeakMap<Db, UsageBatcher>();

/**
 * Runs one usage write through the database's batcher (one per database handle). On the embedded database, with its
 * single connection, the second batch in flight simply queues behind the first in the driver.
 */
export function meterInBatch(db: Db, call: BatchedCall): Promise<CallRow> {
  let batcher = batchers.get(db);
  if (!batcher) batchers.set(db, (batcher = new UsageBatcher(db)));
  return batcher.submit(call);
}

/** Sizes of the batches sent so far through this database handle (empty when none). */
export function batchSizes(db: Db): BatchSizes {
  return batchers.get(db)?.sizes ?? new Map();
}
