import type { Clock } from './clock.ts';
import { first, sql, type Db } from './db.ts';

/**
 * Limits counted in PostgreSQL, so that every instance shares one count: a fixed window per key that opens with the
 * key's first hit, checked and counted in one statement (public.rate_limit_hit, migration 20261123000400; restated in
 * 20261126001600). Used by the HTTP limits per client address (http/rate-limit.ts) and by limits per account or
 * recipient (auth/failed-sign-ins.ts, auth/recipient-allowance.ts). No HTTP here, so the auth library's options may
 * use it without an import cycle.
 */

/** Refusals remembered per app at most (beyond that the cache starts over; the database still counts). */
const MAX_CACHED_REFUSALS = 10_000;

export interface RateLimitVerdict {
  allowed: boolean;
  /** Seconds until the window ends (only meaningful when not allowed). */
  retryAfterSec: number;
}

interface Refusal {
  since: number;
  until: number;
}

/** Refusal caches, one per running app (keyed by its deps object), so two apps in one process never share one. */
const refusals = new WeakMap<object, Map<string, Refusal>>();

/**
 * Counts one request against `key` (at most `limit` per window of `windowMs`), in one statement. Exported for
 * limits outside the middleware (failed sign-ins per account).
 */
export async function takeToken(
  deps: { database: { db: Db }; clock: Clock },
  key: string,
  limit: number,
  windowMs: number,
): Promise<RateLimitVerdict> {
  const db = deps.database.db;
  const now = deps.clock.now();
  const nowMs = now.getTime();
  let cache = refusals.get(deps);
  if (!cache) refusals.set(deps, (cache = new Map()));
  const cacheKey = `${key}|${limit}|${windowMs}`;
  const refused = cache.get(cacheKey);
  if (refused && nowMs >= refused.since && nowMs < refused.until) {
    return { allowed: false, retryAfterSec: Math.max(1, Math.ceil((refused.until - nowMs) / 1000)) };
  }
  if (refused) cache.delete(cacheKey);
  const row = await first<{ allowed: boolean; retryAfterMs: string | number }>(
    db,
    sql`select allowed, retry_after_ms as "retryAfterMs" from public.rate_limit_hit(${key}, ${limit}, ${windowMs}, ${now})`,
  );
  if (!row || row.allowed) return { allowed: true, retryAfterSec: 0 };
  const retryAfterMs = Number(row.retryAfterMs);
  if (cache.size >= MAX_CACHED_REFUSALS) cache.clear();
  cache.set(cacheKey, { since: nowMs, until: nowMs + retryAfterMs });
  return { allowed: false, retryAfterSec: Math.max(1, Math.ceil(retryAfterMs / 1000)) };
}

/** Gives one counted request back (it turned out not to count, e.g. a sign-in that did not fail). */
export async function refundToken(deps: { database: { db: Db }; clock: Clock }, key: string): Promise<void> {
  await sql`select public.rate_limit_refund(${key}, ${deps.clock.now()})`.execute(deps.database.db);
}
