import { Webhook } from 'standardwebhooks';
import type { Clock } from '../platform/clock.ts';
import type { Config } from '../platform/config.ts';
import { first, rows, sql, type Database } from '../platform/db.ts';
import { claimable, leaseEnd, leaseEndsAt, recordWithinLease } from '../platform/lease.ts';
import type { Logger } from '../platform/logger.ts';
import { oneLine } from '../platform/text.ts';
import { eventPayload } from './deliveries.ts';
import { secretBox, TYPE_TAKEN_OFF } from './endpoints.ts';
import type { WebhookEventType } from './schemas.ts';
import { SecretUnreadable } from './secrets.ts';

/**
 * The webhook outbox's delivery: `drainWebhookOutbox(deps, { limit })` sends what is due and returns. Any process
 * may call it, any number at once (the Node entry's loop below, an internal endpoint a scheduler such as pg_cron
 * calls, a test): deliveries are claimed with FOR UPDATE SKIP LOCKED and leased (in the database's clock:
 * platform/lease.ts, review 25), so two drains never send the same delivery at the same time, and a drain that dies
 * mid-send leaves its delivery to be retried when the lease ends. An attempt's outcome that the database does not
 * take at once is written again until shortly before the lease ends (recordWithinLease), so a database restart of a
 * few seconds does not get the delivery sent again.
 *
 * Rules (contract.md revision 2, "Agent webhooks"):
 *   - Per endpoint in event order: a delivery is sent only when no earlier-numbered delivery to the same endpoint is
 *     still pending (being retried, or in flight in another drain).
 *   - Signed per Standard Webhooks with the `standardwebhooks` package: `webhook-id` = the event id (the same on
 *     every attempt and redelivery: receivers deduplicate on it), `webhook-timestamp` = the send time in seconds,
 *     `webhook-signature` = `v1,<base64 HMAC-SHA256>` (plus a second one with the previous secret for 24 h after a
 *     rotation). Body: `{ type, timestamp, data }`.
 *   - A 2xx answered within 10 s counts. Anything else (another status, a redirect, a timeout, no connection) is
 *     retried with exponential backoff and jitter; an attempt that fails 24 h or more after the later of the
 *     delivery's queueing and its endpoint's first failure of the current run (public.webhook_retries_over) ends
 *     the delivery as `failed` (an admin can redeliver it). Every attempt is logged with its status code, duration
 *     and error.
 *   - Only the types an endpoint lists are sent to it: a delivery whose type was taken off is ended unsent when a
 *     claim comes to it (`claim`), and one in flight meanwhile is not tried again after a failed attempt.
 * Nothing here runs inside a request: a slow or dead receiver slows only the drain.
 * Runtime-neutral: fetch with AbortSignal.timeout and WebCrypto, the same on Node and Deno.
 */

export interface WebhookDrainDeps {
  database: Database;
  clock: Clock;
  logger: Logger;
  config: Pick<Config, 'authSecret'>;
}

export interface DrainOptions {
  /** At most this many delivery attempts in this call (default 100). */
  limit?: number;
  /** Per-attempt time limit in ms (default 10 000, the contract's). */
  timeoutMs?: number;
  /**
   * Once aborted, the drain claims nothing more: the attempts in flight (each bounded by timeoutMs) finish and are
   * recorded, and it returns (createWebhookWorker's stop()).
   */
  signal?: AbortSignal;
}

export interface DrainResult {
  attempted: number;
  delivered: number;
  /** failed attempts that will be retried */
  retrying: number;
  /**
   * deliveries given up on by this call (status `failed`): attempted, waiting behind one and as long overdue, or come
   * to the head of their endpoint's queue with a type the endpoint no longer lists (unsent)
   */
  failed: number;
}

export const DELIVERY_TIMEOUT_MS = 10_000;
/** A failure is retried until its endpoint has been failing this long since the delivery was queued (public.webhook_retries_over). */
export const RETRY_WINDOW_MS = 24 * 60 * 60 * 1000;
/** A claimed delivery is left alone by other drains this long (longer than an attempt can take). */
const LEASE_MS = 60_000;
/** Attempts in flight at once in one drain. */
const SLOTS = 25;
/** Drains of the Node loop running at once (createWebhookWorker). */
const MAX_DRAINS = 4;
const FIRST_RETRY_MS = 10_000;
const MAX_RETRY_MS = 2 * 60 * 60 * 1000;

/**
 * Delay before retry number `attempts` (1 = after the first failure): 10 s doubling up to 2 h, with "equal jitter"
 * (half fixed, half random), so receivers coming back from an outage are not hit by every sender at once.
 */
export function retryDelayMs(attempts: number, random: () => number = Math.random): number {
  const base = Math.min(FIRST_RETRY_MS * 2 ** Math.max(0, attempts - 1), MAX_RETRY_MS);
  return Math.round(base / 2 + random() * (base / 2));
}

interface Claimed {
  /** When this drain's lease of it ends, on this process's monotonic clock (leaseEndsAt). */
  leaseEndsAt: number;
  id: string;
  endpointId: string;
  eventId: string;
  attempts: number;
  type: WebhookEventType;
  occurredAt: Date | string;
  data: Record<string, unknown>;
  url: string;
  secret: string;
  /** secrets rotations replaced, each signing until its `until` (migration 20261127004500) */
  earlierSecrets: Array<{ secret: string; until: string }>;
}

type Outcome = 'delivered' | 'retrying' | 'failed';

export async function drainWebhookOutbox(deps: WebhookDrainDeps, options: DrainOptions = {}): Promise<DrainResult> {
  const limit = Math.max(1, Math.min(options.limit ?? 100, 10_000));
  const timeoutMs = options.timeoutMs ?? DELIVERY_TIMEOUT_MS;
  const result: DrainResult = { attempted: 0, delivered: 0, retrying: 0, failed: 0 };
  // Up to SLOTS attempts at once: one claim takes what is due (one query when nothing is), and each slot then claims
  // its next delivery as soon as its last one is done, until nothing is due. A receiver that takes its 10 s holds one
  // slot, not the others: with rounds (claim a batch, wait for all of it), one slow receiver made every other
  // endpoint wait for it, round after round. The claim gives each endpoint one delivery at a time, so a delivered one
  // lets the next to that endpoint go, in order, in the same drain.
  // `attempted` counts a delivery from its claim on, so slots claiming at once stay within the limit.
  // Each endpoint gets its share of the limit: at most limit / (endpoints this drain has claimed for), so far. Without
  // it a receiver that answers at once, with a backlog its agent made (holds left to expire are an event each), took
  // nearly the whole limit while another agent's receiver of 400 ms waited on its first answer: that agent got a few
  // deliveries per drain, its events piled up and, 72 hours on, were failed unsent (review 83). An endpoint alone
  // still has the whole limit.
  const perEndpoint = new Map<string, number>();
  const counted = (delivery: Claimed) => perEndpoint.set(delivery.endpointId, (perEndpoint.get(delivery.endpointId) ?? 0) + 1);
  const hadTheirShare = () => {
    const share = Math.ceil(limit / Math.max(1, perEndpoint.size));
    return [...perEndpoint].filter(([, n]) => n >= share).map(([endpointId]) => endpointId);
  };
  const claimOne = async () => {
    if (result.attempted >= limit || options.signal?.aborted) return undefined;
    result.attempted += 1;
    const claimId = crypto.randomUUID();
    try {
      const skipped = hadTheirShare();
      let { claimed: [delivery], unsent } = await claim(deps, claimId, 1, skipped);
      // The share only makes room for the other endpoints' work: when none of them has any left in this drain (a due
      // head, or one in flight with more behind it), the endpoints that had their share go on, so the drain still uses
      // its whole limit (review 85: a busy endpoint stopped at half the limit whenever another agent had one event, and
      // its backlog grew to the 72-hour failure).
      if (!delivery && skipped.length > 0 && !(await othersHaveWork(deps, skipped))) {
        const rest = await claim(deps, claimId, 1, []);
        [delivery] = rest.claimed;
        unsent += rest.unsent;
      }
      result.failed += unsent;
      if (!delivery) result.attempted -= 1;
      else counted(delivery);
      return delivery && { claimId, delivery };
    } catch (err) {
      // Review 25: a claim that threw rejected the whole drain while its other slots went on unobserved. Now it ends
      // this slot only; the others finish what they hold, and the drain reports what was done.
      result.attempted -= 1;
      deps.logger.warn('webhook drain: claiming the next delivery failed; this slot stops, the others go on', { err });
      return undefined;
    }
  };
  const slot = async (first: { claimId: string; delivery: Claimed }) => {
    for (let next: typeof first | undefined = first; next; next = await claimOne()) {
      try {
        const { outcome, failedBehind } = await attempt(deps, next.claimId, next.delivery, timeoutMs);
        result[outcome] += 1;
        result.failed += failedBehind;
      } catch (err) {
        // One delivery whose attempt could not be recorded (the database refused the write, or stayed away until
        // shortly before the lease's end) does not fail the drain's other slots: it keeps its claim and is tried
        // again when the lease ends.
        deps.logger.error('webhook delivery attempt not recorded', { deliveryId: next.delivery.id, webhookId: next.delivery.endpointId, err });
        result.retrying += 1;
      }
    }
  };
  if (options.signal?.aborted) return result;
  const claimId = crypto.randomUUID();
  const { claimed: firstClaimed, unsent } = await claim(deps, claimId, Math.min(SLOTS, limit), []);
  firstClaimed.forEach(counted);
  result.attempted = firstClaimed.length;
  result.failed += unsent;
  await Promise.all(firstClaimed.map((delivery) => slot({ claimId, delivery })));
  return result;
}


/**
 * Claims up to n due deliveries. A head whose event type its endpoint no longer lists is not sent: the claim marks it
 * failed unsent, as the PATCH that took the type off does with those it sees (one committed while the PATCH ran is
 * seen only here), so it does not stay at the head of its endpoint's queue; the claim then runs again for the
 * deliveries behind it. `unsent` counts those.
 */
async function claim(deps: WebhookDrainDeps, claimId: string, n: number, skipped: string[]): Promise<{ claimed: Claimed[]; unsent: number }> {
  const claimed: Claimed[] = [];
  let unsent = 0;
  for (;;) {
    const got = await claimRound(deps, claimId, n - claimed.length, skipped);
    claimed.push(...got.claimed);
    unsent += got.unsent;
    if (got.unsent === 0 || claimed.length >= n) return { claimed, unsent };
  }
}

/**
 * Each endpoint `e` with its first pending delivery `h` (only that one may go: per-endpoint order); one index probe
 * per endpoint. The claim and othersHaveWork read the same heads.
 */
const endpointHeads = () => sql`public.webhook_endpoints e
          cross join lateral (select d.id, d.next_attempt_at, d.event_seq, d.claim_id from public.webhook_deliveries d
                              where d.endpoint_id = e.id and d.status = 'pending'
                              order by d.event_seq limit 1) h`;

/**
 * Whether an enabled endpoint other than `skipped` has deliveries left to go: its first pending one is due, or is
 * being attempted (a live lease) with more pending behind it (endpointHeads, as the claim reads them).
 */
async function othersHaveWork(deps: WebhookDrainDeps, skipped: string[]): Promise<boolean> {
  const now = deps.clock.now();
  const row = await first<{ waiting: boolean }>(
    deps.database.db,
    sql`select exists (
          select 1
          from ${endpointHeads()}
          where e.enabled and e.id <> all (${skipped}::uuid[])
            and (${claimable('h', now)}
                 or (h.claim_id is not null and exists (select 1 from public.webhook_deliveries b
                                                        where b.endpoint_id = e.id and b.status = 'pending' and b.event_seq > h.event_seq)))
        ) as waiting`,
  );
  return row?.waiting ?? false;
}

/** `skipped`: endpoints that had their share of this drain (their heads wait for the next one). */
async function claimRound(deps: WebhookDrainDeps, claimId: string, n: number, skipped: string[]): Promise<{ claimed: Claimed[]; unsent: number }> {
  const now = deps.clock.now();
  // Before the claim is sent, so never later than the lease's end the database writes.
  const leaseEnds = leaseEndsAt(LEASE_MS);
  const found = await rows<Omit<Claimed, 'leaseEndsAt'> & { unsent: number }>(
    deps.database.db,
    // Only each enabled endpoint's first pending delivery may go (per-endpoint order), so the claim reads exactly
    // those: one index probe per endpoint. It used to walk every due delivery and drop those with an earlier pending
    // one, so an endpoint that kept failing, behind which its agent could pile up any number of deliveries (holds
    // left to expire are one event each), made every claim of every drain walk that whole backlog.
    // Then the first n heads no other claim holds are locked (SKIP LOCKED: claims running at once, in this drain's
    // slots or in other drains, each take a different one) and checked again, still due and still first.
    // Of those, one whose type its endpoint no longer lists is failed unsent (`unlisted`, review 16: the change that
    // emitted it committed while a PATCH took the type off, so the PATCH could not see it), the others are claimed.
    // The one statement always answers one row: the count of those failed, with a claimed delivery or nulls.
    sql`with heads as (
          select h.id, h.next_attempt_at, h.event_seq
          from ${endpointHeads()}
          where e.enabled and ${claimable('h', now)} and e.id <> all (${skipped}::uuid[])
        ), due as (
          select d.id
          from public.webhook_deliveries d join heads on heads.id = d.id
          where d.status = 'pending' and ${claimable('d', now)}
            and not exists (select 1 from public.webhook_deliveries p
                             where p.endpoint_id = d.endpoint_id and p.status = 'pending' and p.event_seq < d.event_seq)
          order by heads.next_attempt_at, heads.event_seq
          limit ${n}
          for update of d skip locked
        ), unlisted as (
          update public.webhook_deliveries d
             set status = 'failed', next_attempt_at = ${now}, claim_id = null, last_error = ${TYPE_TAKEN_OFF}
            from due, public.webhook_events ev, public.webhook_endpoints e
           where d.id = due.id and ev.id = d.event_id and e.id = d.endpoint_id and ev.type <> all (e.events)
          returning 1
        ), claimed as (
          update public.webhook_deliveries d
             set claim_id = ${claimId},
                 attempts = d.attempts + 1,
                 next_attempt_at = ${leaseEnd(LEASE_MS)},
                 first_attempt_at = coalesce(d.first_attempt_at, ${now}),
                 last_attempt_at = ${now}
            from due, public.webhook_events ev, public.webhook_endpoints e
           where d.id = due.id and ev.id = d.event_id and e.id = d.endpoint_id and ev.type = any (e.events)
          returning d.id, d.endpoint_id as "endpointId", d.event_id as "eventId", d.attempts,
                    ev.type, ev.occurred_at as "occurredAt", ev.data, e.url,
                    e.secret_encrypted as secret, e.earlier_secrets as "earlierSecrets"
        )
        select claimed.*, u.unsent
          from (select count(*)::int as unsent from unlisted) u
          left join claimed on true`,
  );
  return {
    claimed: found.filter((r) => r.id !== null).map(({ unsent: _, ...c }) => ({ ...c, leaseEndsAt: leaseEnds })),
    unsent: found[0]?.unsent ?? 0,
  };
}

async function attempt(
  deps: WebhookDrainDeps,
  claimId: string,
  d: Claimed,
  timeoutMs: number,
): Promise<{ outcome: Outcome; failedBehind: number }> {
  const { clock, logger } = deps;
  const sentAt = clock.now();
  const started = performance.now();
  let statusCode: number | null = null;
  let error: string | null = null;
  try {
    const body = JSON.stringify(eventPayload(d.type, d.occurredAt, d.data));
    const signature = (await signingSecrets(deps, d, sentAt)).map((s) => new Webhook(s).sign(d.eventId, sentAt, body)).join(' ');
    const res = await fetch(d.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'user-agent': 'agent-marketplace-webhooks/1',
        'webhook-id': d.eventId,
        'webhook-timestamp': String(Math.floor(sentAt.getTime() / 1000)),
        'webhook-signature': signature,
      },
      body,
      redirect: 'manual',
      signal: AbortSignal.timeout(timeoutMs),
    });
    statusCode = res.status;
    if (res.status >= 200 && res.status < 300) {
      await res.body?.cancel().catch(() => {});
    } else {
      const snippet = await readSnippet(res, 200);
      error = `answered HTTP ${res.status}${res.status >= 300 && res.status < 400 ? ' (redirects are not followed)' : ''}${snippet ? `: ${snippet}` : ''}`;
    }
  } catch (err) {
    error = describeFailure(err, timeoutMs);
  }
  const durationMs = Math.max(0, Math.round(performance.now() - started));
  const now = clock.now();
  const retryAt = new Date(now.getTime() + retryDelayMs(d.attempts));

  // One statement: the attempt is logged whatever happens; the delivery, and its endpoint's run of failures (ended by
  // a delivered attempt, begun by the first failed one), change only if this drain still holds its claim (an endpoint
  // deleted meanwhile took its deliveries with it; a redelivery or an expired lease handed it on). Whether a failure
  // ends the delivery is public.webhook_retries_over's rule (migration 20261126001400): 24 hours of its endpoint
  // failing since it was queued, or 72 hours since it was queued whatever the endpoint did meanwhile (migration
  // 20261126002600). Deliveries waiting behind one that fails for good whose 24 hours are over too fail
  // with it, unsent: the endpoint failed all through them, and sending each for one more try would keep an endpoint
  // that accepts connections and never answers at one delivery per 10 s, slower than a busy agent's events arrive.
  // Those waiting 72 hours fail unsent after any attempt, delivered or not: a receiver that accepts one message a day,
  // or accepts everything slower than its agent's events come, cannot keep a backlog without end.
  // Written again while the database cannot take it, until shortly before the lease ends (review 25: one failed try
  // left the delivery to be sent again when its lease ran out). A try whose answer was lost may have committed: the
  // attempt's log row, named by attemptId, is then there already, and the claim is no longer this drain's, so trying
  // again changes nothing.
  const attemptId = crypto.randomUUID();
  const cutoff = new Date(now.getTime() - RETRY_WINDOW_MS);
  // An endpoint given a new url while this attempt was in flight (review 63) started a fresh run then (endpoints.ts
  // updateWebhook), but could not queue this delivery again: this drain held it. A failure at the old url is then no
  // news about the new one: the delivery is due at once, its retry delays starting over, and the endpoint's run of
  // failures is not begun by it (the old url's failure had held the backlog up to 2 hours from the new receiver).
  const record = () => first<{ status: 'delivered' | 'failed' | 'pending' | null; moved: boolean; behind: number }>(
    deps.database.db,
    sql`with logged as (
          insert into public.webhook_delivery_attempts (id, delivery_id, attempted_at, duration_ms, status_code, error)
          select ${attemptId}, ${d.id}, ${sentAt}, ${durationMs}, ${statusCode}, ${error}
          where exists (select 1 from public.webhook_deliveries where id = ${d.id})
          on conflict (id) do nothing
        ), endpoint as (
          update public.webhook_endpoints e
             set failing_since = case when ${error === null} then null
                                      when e.url <> ${d.url} then e.failing_since
                                      else coalesce(e.failing_since, ${sentAt}::timestamptz) end
           where e.id = ${d.endpointId}
             and exists (select 1 from public.webhook_deliveries where id = ${d.id} and claim_id = ${claimId})
          returning e.id, e.failing_since, e.events, e.url <> ${d.url} as moved
        ), recorded as (
          update public.webhook_deliveries d
             set status = o.status,
                 next_attempt_at = case when o.status <> 'pending' then ${now}::timestamptz
                                        when endpoint.moved then '-infinity'::timestamptz
                                        else ${retryAt}::timestamptz end,
                 attempts = case when o.status = 'pending' and endpoint.moved then 0 else d.attempts end,
                 delivered_at = case when o.status = 'delivered' then ${now}::timestamptz end,
                 last_status_code = ${statusCode},
                 last_error = ${error},
                 claim_id = null
            from endpoint,
                 (select case when ${error === null} then 'delivered'
                              -- its type was taken off the endpoint while it was in flight: not tried again
                              when not (${d.type}::text = any (e.events)) then 'failed'
                              when e.moved then 'pending'
                              when public.webhook_retries_over(coalesce(x.redelivered_at, x.created_at), e.failing_since, ${cutoff}) then 'failed'
                              else 'pending' end as status
                    from public.webhook_deliveries x, endpoint e
                   where x.id = ${d.id}) o
           where d.id = ${d.id} and d.claim_id = ${claimId} and endpoint.id = d.endpoint_id
          returning d.status
        ), behind as (
          update public.webhook_deliveries w
             set status = 'failed', next_attempt_at = ${now}, claim_id = null,
                 last_error = case
                   when public.webhook_delivery_outlived(coalesce(w.redelivered_at, w.created_at), ${cutoff})
                     then 'not sent: queued 72 hours ago and still waiting behind earlier deliveries'
                   else 'not sent: its endpoint had been failing for 24 hours since it was queued, behind an earlier delivery' end
            from endpoint, recorded
           where w.endpoint_id = endpoint.id and w.status = 'pending' and w.claim_id is null
             -- implied by both rules below; lets webhook_deliveries_endpoint_queued_idx find only these (review 31)
             and coalesce(w.redelivered_at, w.created_at) <= ${cutoff}
             and ((recorded.status = 'failed'
                   and public.webhook_retries_over(coalesce(w.redelivered_at, w.created_at), endpoint.failing_since, ${cutoff}))
                  or public.webhook_delivery_outlived(coalesce(w.redelivered_at, w.created_at), ${cutoff}))
          returning 1
        )
        select (select status from recorded) as status, coalesce((select moved from endpoint), false) as moved,
               (select count(*) from behind)::int as behind`,
  );
  const row = await recordWithinLease(d.leaseEndsAt, record, (err, n) => {
    if (n === 1) logger.warn('webhook attempt made; recording it failed, retrying until its claim expires', { deliveryId: d.id, webhookId: d.endpointId, error: (err as Error).message });
  });
  // A delivery this drain no longer holds is someone else's to record: counted here as what its attempt was.
  const status = row?.status ?? (error === null ? 'delivered' : 'pending');
  const outcome: Outcome = status === 'pending' ? 'retrying' : status;
  const behind = row?.behind ?? 0;

  if (outcome !== 'delivered') {
    const fields = { deliveryId: d.id, webhookId: d.endpointId, eventId: d.eventId, attempts: d.attempts, statusCode, error };
    if (outcome === 'failed') {
      logger.warn('webhook delivery failed for good after its retry window; an admin can redeliver it', { ...fields, failedBehindIt: behind });
    } else if (row?.moved) {
      logger.warn('webhook delivery attempt to the endpoint\'s old url failed; its new url is tried at the next drain', fields);
    } else logger.warn('webhook delivery attempt failed; retrying', { ...fields, nextAttemptAt: retryAt.toISOString() });
  }
  return { outcome, failedBehind: behind };
}

/** The current secret, and each one a rotation replaced while its 24 hours after that last. */
async function signingSecrets(deps: WebhookDrainDeps, d: Claimed, at: Date): Promise<string[]> {
  const box = secretBox(deps.config.authSecret);
  const secrets = [await box.open(d.secret, d.endpointId)];
  for (const earlier of d.earlierSecrets) {
    if (new Date(earlier.until) <= at) continue;
    const opened = await box.open(earlier.secret, d.endpointId).catch(() => null);
    if (opened) secrets.push(opened);
  }
  return secrets;
}

function describeFailure(err: unknown, timeoutMs: number): string {
  if (err instanceof SecretUnreadable) return err.message;
  const e = err as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError') return `no answer within ${timeoutMs / 1000} s`;
  const cause = e?.cause?.code ?? e?.cause?.message;
  return oneLine(`${e?.message ?? String(err)}${cause ? ` (${cause})` : ''}`).slice(0, 500);
}

/** The start of an error answer's body, for the attempt log (bounded: a receiver cannot make us read megabytes). */
async function readSnippet(res: Response, max: number): Promise<string> {
  if (!res.body) return '';
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  try {
    while (text.length < max) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
  } catch {
    // a body cut short or too slow: what arrived is enough
  } finally {
    reader.cancel().catch(() => {});
  }
  // one line (platform/text.ts): NUL above all, which PostgreSQL's text cannot hold (a hostile endpoint answering one
  // made the attempt's bookkeeping throw, so its delivery was never logged, never backed off and never `failed`)
  return oneLine(text).slice(0, max);
}

/**
 * A loop that drains the outbox every `pollMs` in this process: the Node entry's convenience (functions/deps.ts
 * starts it outside tests). Nothing depends on it: a scheduler calling drainWebhookOutbox does the same work.
 */
export function createWebhookWorker(deps: WebhookDrainDeps, options: { pollMs?: number } = {}) {
  const pollMs = options.pollMs ?? 1000;
  let timer: ReturnType<typeof setInterval> | undefined;
  // Drains may overlap (every claim skips what another holds): a drain still waiting for a slow receiver does not keep
  // the next tick from serving everyone else. At most MAX_DRAINS at once, so a run of slow receivers stays bounded.
  const running = new Set<Promise<unknown>>();
  // Aborted by stop(): the drains under way claim nothing more (review 25, as the mailer's stop).
  let stopping = new AbortController();

  const tick = () => {
    if (running.size >= MAX_DRAINS) return;
    const started = drainWebhookOutbox(deps, { signal: stopping.signal })
      .catch((err) => deps.logger.error('webhook delivery loop failed', { err }))
      .finally(() => running.delete(started));
    running.add(started);
  };

  return {
    start() {
      if (stopping.signal.aborted) stopping = new AbortController();
      if (timer) return;
      timer = setInterval(tick, pollMs);
      (timer as { unref?: () => void }).unref?.();
    },
    /**
     * Stops the loop and the drains already running, which start no attempt after this; waits (bounded: an attempt
     * takes at most DELIVERY_TIMEOUT_MS, then its record) for their attempts in flight, so the database can be closed
     * after them.
     */
    async stop() {
      stopping.abort();
      if (timer) clearInterval(timer);
      timer = undefined;
      let bound: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([Promise.all(running), new Promise((r) => (bound = setTimeout(r, DELIVERY_TIMEOUT_MS + 2_000)))]);
      clearTimeout(bound);
    },
  };
}
