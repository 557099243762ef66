import { isConnectionLost, isTransientConflict, sql, type RawBuilder } from './db.ts';

/**
 * The leases of the two outboxes (mail_outbox: platform/mailer.ts; webhook_deliveries: webhooks/drain.ts). A pass
 * claims a row by naming itself in claim_id and moving next_attempt_at to its lease's end; no other pass claims the
 * row before that end, and the holder clears claim_id when it records the outcome.
 *
 * Two clocks, one per kind of time (review 25):
 *   - A lease is in the database's clock: its end is the claiming statement's now() plus the lease (`leaseEnd`), and
 *     a claimed row is free again once the database's now() has passed it (`claimable`). Every instance shares that
 *     clock. With each instance's own clock, as before, one whose clock ran ahead of the holder's by more than the
 *     lease's slack took a mail the holder was still sending, and sent it too.
 *   - An unclaimed row's next_attempt_at is when it is due (a retry's backoff, or at once), in the service's clock
 *     (deps.clock, which tests move), and is compared with the service's clock. A clock that runs ahead retries
 *     early; it never takes what another pass holds.
 *
 * The holder knows its lease's end on its own monotonic clock (`leaseEndsAt`, taken just before the claim was sent,
 * so never later than the end the database wrote): that bounds how long it may go on trying to record an outcome.
 */

/** When a lease of `ms` taken now ends, on this process's monotonic clock (performance.now()). Call it before the claim. */
export function leaseEndsAt(ms: number): number {
  return performance.now() + ms;
}

/** The end of a lease of `ms` taken by this statement, in the database's clock: for the claim's `set next_attempt_at = ...`. */
export function leaseEnd(ms: number): RawBuilder<unknown> {
  return sql`now() + ${ms}::double precision * interval '1 millisecond'`;
}

/**
 * Whether the row `alias` (of mail_outbox or webhook_deliveries) may be claimed now: unclaimed and due by the
 * service's clock `now`, or claimed and its lease over by the database's clock. The first line is implied by the
 * second; it only gives the planner a range on next_attempt_at (the outboxes' due indexes).
 */
export function claimable(alias: string, now: Date): RawBuilder<unknown> {
  const next = sql.ref(`${alias}.next_attempt_at`);
  const claim = sql.ref(`${alias}.claim_id`);
  return sql`(${next} <= greatest(${now}::timestamptz, now())
              and case when ${claim} is null then ${next} <= ${now}::timestamptz else ${next} <= now() end)`;
}

/** Pauses between tries of a record: 100 ms doubling up to 2 s (a restart or failover takes seconds). */
const FIRST_PAUSE_MS = 100;
const MAX_PAUSE_MS = 2_000;
/** No try starts later than this before the lease's end: a write that lands after it may be too late to matter. */
const RECORD_MARGIN_MS = 2_000;

/**
 * Writes the outcome of work done under a lease (a mail sent, a webhook attempt made), trying again while the
 * database cannot take it (a connection lost, a statement timed out, a deadlock: a restart or a failover takes
 * seconds) until shortly before the lease ends at `endsAt` (leaseEndsAt); then throws the last error, and the lease
 * decides (the work is done again by whoever claims it next). Review 25: the mail's record gave up after five tries
 * over about a second, so a database back after three seconds still got the mail sent twice. Any other error is
 * thrown at once: trying again would not change it. `write` must be safe to run again after a try whose answer was
 * lost (it may have committed). `retrying` is told of each failed try that will be tried again (1 = the first).
 */
export async function recordWithinLease<T>(
  endsAt: number,
  write: () => Promise<T>,
  retrying: (err: unknown, attempt: number) => void,
): Promise<T> {
  let pause = FIRST_PAUSE_MS;
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (err) {
      const left = endsAt - RECORD_MARGIN_MS - performance.now();
      if (left <= 0 || poolClosed(err) || !(isConnectionLost(err) || isTransientConflict(err))) throw err;
      retrying(err, attempt);
      await new Promise((resolve) => setTimeout(resolve, Math.min(pause, left)));
      pause = Math.min(pause * 2, MAX_PAUSE_MS);
    }
  }
}

/**
 * postgres.js's answer once this process closed its pool (shutdown): no later try can succeed, so trying on only
 * kept timers alive for the rest of the lease after the stop (the read-through of review 25's mends).
 */
function poolClosed(err: unknown): boolean {
  return String((err as { code?: unknown } | null)?.code) === 'CONNECTION_ENDED';
}
