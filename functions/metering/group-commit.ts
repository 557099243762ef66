import type { BearerCheck } from '../http/context.ts';
import { ApiError, pgCode } from '../http/errors.ts';
import { isConnectionLost, isLockTimeout, isTransientConflict, rows, sql, type Db } from '../platform/db.ts';

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
 *
 * A counter held by another transaction (review 31): a quota-lowering admin change holds counter locks across several
 * round trips, and a process that stalls in the middle of one keeps them. A batch waits at most lock_timeout (2 s, a SET
 * clause of the SQL function: migration 20261126001600) and then fails with 55P03, which frees its slot at once: only
 * two batches are ever in flight, so a wait without bound there stopped every usage call of the instance. Its calls are
 * then sent one by one beside the batches, so the others are answered and the call on the held counter gets 503
 * UNAVAILABLE (retryable). That counter is remembered: the next call on it goes alone, beside the batches (a probe),
 * and calls arriving meanwhile wait for the probe's answer instead of taking a batch slot; when the probe gets through
 * the counter is free again and they join the batches, when it times out too they get 503 with it. So a held counter
 * costs the others one lock_timeout at most, not one per call on it.
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
/**
 * How long an agent and user found held are remembered after the last lock timeout on them (then their calls go in
 * batches again, also while their calls keep coming). A property only so tests need not wait a minute.
 */
export const heldCounters = { forMs: 60_000 };
/** At most this many held counters remembered (more: the memory starts over; a forgotten one costs one more wait). */
const MAX_HELD = 10_000;

interface Pending {
  call: BatchedCall;
  resolve: (row: CallRow) => void;
  reject: (err: unknown) => void;
}

/** How many batches of each size went out (size -> count): what the benchmark prints. */
export type BatchSizes = Map<number, number>;

/** A counter whose lock a call of this instance waited for until lock_timeout. */
interface HeldCounter {
  /** When a call last found it held (performance.now()). */
  since: number;
  /** While a probe (one call, alone) is out: the calls on this counter waiting for its answer. */
  waiting: Pending[] | undefined;
  /** A call timed out alone on it (kept heldCounters.forMs); false: only suspected, from a batch that timed out. */
  confirmed: boolean;
}

/**
 * Whose counters a call locks: the agent's and the user's. Coarser than one counter on purpose: a commit, release or
 * read names only its reservation, whose counter this process does not know, and keyed by reservation each one on a
 * held counter took a batch slot for a whole lock_timeout (two of them stalled every agent's calls again; found by a
 * review). Keyed by agent and user, every call of that user at that agent waits for the one probe while a counter of
 * theirs is held; a probe on another of their counters gets through at once and lets the rest go.
 */
function counterKey(call: BatchedCall): string {
  return `${call.agentId} ${call.check.userId}`;
}

/** What a call on a counter held past lock_timeout answers: 503 UNAVAILABLE, to be retried with the same clientReqId. */
function counterBusy(): ApiError {
  return new ApiError(
    'UNAVAILABLE',
    'This usage counter is locked by another change right now; retry shortly (with the same clientReqId)',
    { reason: 'counter_locked' },
    { 'Retry-After': '1' },
  );
}

class UsageBatcher {
  #queue: Pending[] = [];
  #inFlight = 0;
  /** Counters found held past lock_timeout (counterKey -> state); empty in normal operation. */
  readonly #held = new Map<string, HeldCounter>();
  readonly sizes: BatchSizes = new Map();
  readonly #db: Db;

  constructor(db: Db) {
    this.#db = db;
  }

  submit(call: BatchedCall): Promise<CallRow> {
    return new Promise<CallRow>((resolve, reject) => {
      const pending = { call, resolve, reject };
      // One size check on the common path: the map is empty unless a lock wait timed out lately.
      if (this.#held.size > 0 && this.#aside(pending)) return;
      this.#queue.push(pending);
      this.#pump();
    });
  }

  /**
   * A call of an agent and user with a counter found held lately goes alone, beside the batches, or waits for the one
   * that went; true when it was taken care of here, false when nothing of theirs is known as held (it goes in a batch).
   * While a counter of theirs is known held (a call of theirs timed out on it within heldCounters.forMs), their calls go
   * alone one after another, never in a batch slot: which of their counters a commit or read locks is not known here,
   * so one that got through says nothing of the next. Merely suspected (they were in a batch that timed out), the
   * first call that gets through clears them and the rest go back to the batches.
   */
  #aside(pending: Pending): boolean {
    const key = counterKey(pending.call);
    const held = this.#held.get(key);
    if (!held) return false;
    if (performance.now() - held.since > heldCounters.forMs && !held.waiting) {
      this.#held.delete(key);
      return false;
    }
    if (held.waiting) {
      held.waiting.push(pending);
      return true;
    }
    held.waiting = [];
    this.#probe(key, held, pending);
    return true;
  }

  /** Sends `pending` alone; then the calls that waited meanwhile, as #aside says. */
  #probe(key: string, held: HeldCounter, pending: Pending): void {
    void this.#alone(pending).then((free) => {
      const waiting = held.waiting ?? [];
      if (!free) {
        held.waiting = undefined;
        for (const p of waiting) p.reject(counterBusy());
        return;
      }
      // Still within its time since the last timeout: the next waiting call goes alone. Past it, the rest go back to
      // the batches (review 36: only an empty queue ended the alone mode, so a backend keeping two calls in flight
      // stayed one call at a time for as long as its traffic lasted, long after the counter was free).
      if (held.confirmed && performance.now() - held.since <= heldCounters.forMs) {
        const next = waiting.shift();
        if (next) this.#probe(key, held, next);
        else held.waiting = undefined;
        return;
      }
      held.waiting = undefined;
      if (this.#held.get(key) === held) this.#held.delete(key);
      this.#queue.push(...waiting);
      this.#pump();
    });
  }

  /**
   * Sends one call alone, outside the batch slots. Resolves false when its counter was still held past lock_timeout
   * (the call got 503 and the counter is remembered as held), true otherwise (answered, or failed for another reason).
   */
  async #alone(p: Pending): Promise<boolean> {
    try {
      const [row] = await runAgain(this.#db, [p.call]);
      p.resolve(row!);
      return true;
    } catch (err) {
      if (!isLockTimeout(err)) {
        p.reject(err);
        return true;
      }
      this.#rememberHeld(p.call, true);
      p.reject(counterBusy());
      return false;
    }
  }

  /** `confirmed`: a call of theirs timed out alone; otherwise they were only in a batch that timed out. */
  #rememberHeld(call: BatchedCall, confirmed: boolean): void {
    const key = counterKey(call);
    const held = this.#held.get(key);
    if (held) {
      if (confirmed) {
        held.since = performance.now();
        held.confirmed = true;
      }
      return;
    }
    // Forgetting costs one more lock_timeout per forgotten counter; only waiting calls must not be dropped.
    if (this.#held.size >= MAX_HELD) for (const [k, h] of this.#held) if (!h.waiting) this.#held.delete(k);
    this.#held.set(key, { since: performance.now(), waiting: undefined, confirmed });
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
      if (isLockTimeout(err)) {
        // Some call of it met a counter another transaction holds. Its slot is freed now (this returns). A lone call is
        // that call; otherwise every counter of the batch is suspect until one call on it, alone beside the batches,
        // gets through: the first call on each counter is that probe and the others on it wait for its answer (#aside),
        // so a held counter with many calls in the batch holds one pool connection for one lock_timeout, not one each.
        if (batch.length === 1) {
          this.#rememberHeld(batch[0]!.call, true);
          batch[0]!.reject(counterBusy());
        } else {
          for (const p of batch) this.#rememberHeld(p.call, false);
          for (const p of batch) if (!this.#aside(p)) this.#queue.push(p);
          this.#pump();
        }
        return;
      }
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

/**
 * runBatch, sent again while PostgreSQL ends it to be run again (each attempt is its own transaction), and while a row
 * it read was deleted under it: a metric an admin deleted between a call's read of it and its counter's insert (the
 * insert waited on the delete's lock, then failed its foreign key, 23503) was a 500 to the agent (review 90). Run again,
 * the call reads the state after the delete and answers it (404 NOT_FOUND for the metric); nothing was written.
 */
async function runAgain(db: Db, calls: BatchedCall[]): Promise<CallRow[]> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await runBatch(db, calls);
    } catch (err) {
      if (attempt >= ATTEMPTS || !(isTransientConflict(err) || pgCode(err) === '23503')) throw err;
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
