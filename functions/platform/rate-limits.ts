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

/**
 * How long an app answers a key's refusal from its cache before asking the database again. Not the window's end: a
 * give-back on another instance (a sign-in that succeeded, a start that wrote nothing) makes room this app cannot see,
 * and a refusal cached until the window's end kept refusing the account's owner there for 15 minutes, or a user's
 * checkout for a day (review 115). One request asks again; the others meanwhile keep the cached refusal (review 117:
 * every request of a flood in flight when it went stale asked), so a flood costs one statement per key per app every
 * 5 seconds.
 */
export const REFUSAL_CACHE_MS = 5_000;

export interface RateLimitVerdict {
  allowed: boolean;
  /** Seconds until the window ends (only meaningful when not allowed). */
  retryAfterSec: number;
}

/**
 * A refusal of `key`, for the limit and window it was counted against; `until` is the window's end, `checked` when the
 * database last said so (or was last asked again).
 */
interface Refusal {
  limit: number;
  windowMs: number;
  since: number;
  until: number;
  checked: number;
}

/**
 * Refusal caches, one per running app (keyed by its deps object), so two apps in one process never share one; by the
 * limit's key alone, so a give-back forgets its key's refusal at once (refundToken, on every successful sign-in too).
 */
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
  return refusedHere(deps, key, limit, windowMs) ?? countHit(deps, key, limit, windowMs);
}

/** Counts one request against `key` in the database (no cache asked first), and keeps a refusal in the cache. */
async function countHit(deps: { database: { db: Db }; clock: Clock }, key: string, limit: number, windowMs: number): Promise<RateLimitVerdict> {
  const now = deps.clock.now();
  const nowMs = now.getTime();
  let cache = refusals.get(deps);
  if (!cache) refusals.set(deps, (cache = new Map()));
  const row = await first<{ allowed: boolean; retryAfterMs: string | number }>(
    deps.database.db,
    sql`select allowed, retry_after_ms as "retryAfterMs" from public.rate_limit_hit(${key}, ${limit}, ${windowMs}, ${now})`,
  );
  if (!row || row.allowed) {
    cache.delete(key); // room again (a give-back elsewhere): a refusal kept while this was asked goes
    return { allowed: true, retryAfterSec: 0 };
  }
  const retryAfterMs = Number(row.retryAfterMs);
  if (cache.size >= MAX_CACHED_REFUSALS) cache.clear();
  cache.set(key, { limit, windowMs, since: nowMs, until: nowMs + retryAfterMs, checked: nowMs });
  return { allowed: false, retryAfterSec: Math.max(1, Math.ceil(retryAfterMs / 1000)) };
}

/**
 * The refusal this app's cache holds for `key` (its window not over), if any; the database is not asked. Once the
 * database said so REFUSAL_CACHE_MS ago, this caller is sent to ask it again (undefined) and the refusal is marked
 * asked, so the callers meanwhile keep it; the answer replaces it (countHit).
 */
function refusedHere(deps: { clock: Clock }, key: string, limit: number, windowMs: number): RateLimitVerdict | undefined {
  return lookHere(deps, key, limit, windowMs).verdict;
}

/**
 * refusedHere's look, saying also whether this caller was handed the re-ask (`reask`: the refusal it marked, and when
 * it was last asked before), so a caller that then does not ask can hand it back (takeUserAndAddressAllowance).
 */
function lookHere(
  deps: { clock: Clock },
  key: string,
  limit: number,
  windowMs: number,
): { verdict?: RateLimitVerdict; reask?: { refusal: Refusal; checked: number; marked: number } } {
  const nowMs = deps.clock.now().getTime();
  let cache = refusals.get(deps);
  if (!cache) refusals.set(deps, (cache = new Map()));
  const refused = cache.get(key);
  if (!refused || refused.limit !== limit || refused.windowMs !== windowMs) return {};
  if (nowMs < refused.since || nowMs >= refused.until) {
    cache.delete(key);
    return {};
  }
  if (nowMs >= refused.checked + REFUSAL_CACHE_MS) {
    const reask = { refusal: refused, checked: refused.checked, marked: nowMs };
    refused.checked = nowMs;
    return { reask };
  }
  return { verdict: { allowed: false, retryAfterSec: Math.max(1, Math.ceil((refused.until - nowMs) / 1000)) } };
}

/**
 * Gives one counted request back (it turned out not to count, e.g. a sign-in that did not fail), and forgets this
 * app's cached refusal of the key: a request refused while the given-back one was in flight left the key refused here
 * for the rest of its window, the count below the limit again (review 102).
 */
export async function refundToken(deps: { database: { db: Db }; clock: Clock }, key: string): Promise<void> {
  await sql`select public.rate_limit_refund(${key}, ${deps.clock.now()})`.execute(deps.database.db);
  refusals.get(deps)?.delete(key);
}

/** A daily allowance's window (it opens with the key's first request). */
export const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * Who asks for something a per-user daily allowance bounds: the user; the agent whose token asks for them (none for the
 * user's own credentials: a cookie session or the first-party token); and the request's client address as the
 * per-address limits count it (`clientSubject` in http/rate-limit.ts: IPv4, or an IPv6 client's /64), undefined where
 * no request tells it (a call from the service itself). Required, so no caller forgets to say where a request came from.
 */
export interface Asker {
  userId: string;
  agentId?: string | null | undefined;
  address: string | undefined;
}

/**
 * A per-user daily allowance with its per-address bound. Accounts cost nothing (sign-up needs no verified address),
 * so a per-user count alone bounded nothing for a script that moves to a fresh account whenever one's day is used up:
 * three throwaway accounts from one address made 150 Checkout Sessions, six sent staff 60 demo-request mails in two
 * minutes (review 33). So requests made with the user's OWN credentials are also counted per client address, several
 * times the per-user figure so an office or a household behind one address is not hindered. Requests with an agent's
 * token are not: their address is the agent backend's, shared by every user of that agent.
 */
export interface UserAndAddressAllowance {
  /** Names the kind: the address's count is kept under `<kind>|address|<address>`. */
  kind: string;
  perUser: number;
  perAddress: number;
  /** The 429's message when the user's count refuses, and when the address's does. */
  message: string;
  addressMessage: string;
}

/**
 * One kind's allowance, its two 429 messages worded alike for every kind: `doing` says what is counted, as in "You can
 * start a checkout 50 times a day" (billing/allowances.ts, catalog/engagement-requests.ts, auth/organization-limits.ts).
 */
export function userAndAddressAllowance(kind: string, doing: string, perUser: number, perAddress: number): UserAndAddressAllowance {
  return {
    kind,
    perUser,
    perAddress,
    message: `You can ${doing} ${perUser} times a day; try again later`,
    addressMessage: `This address can ${doing} ${perAddress} times a day, all its accounts together; try again later`,
  };
}

/** Why a request was refused: its message, the bound it hit and when to try again. */
export interface AllowanceRefusal {
  message: string;
  limitPerDay: number;
  retryAfterSec: number;
}

/**
 * Takes one request of the day from the user's count (`userKey`: per user and credential, as each kind keys it) and,
 * for the user's own credentials from a known address, from the address's: both or neither, so a refusal spends
 * nothing (the user's is given back when the address's refuses). A count this app already knows refused is refused
 * before anything is taken, so a flood costs the database little (one request every 5 s asks again: three statements
 * when the address's count refused), whichever of the two it used up. Returns the
 * refusal, or undefined when the request may go on. The one place every kind's pair is taken (billing/allowances.ts,
 * catalog/engagement-requests.ts, auth/organization-limits.ts).
 */
export async function takeUserAndAddressAllowance(
  deps: { database: { db: Db }; clock: Clock },
  asker: Asker,
  allowance: UserAndAddressAllowance,
  userKey: string,
): Promise<AllowanceRefusal | undefined> {
  const addressKey = addressKeyOf(asker, allowance);
  const refusal = (verdict: RateLimitVerdict, ofAddress: boolean): AllowanceRefusal => ({
    message: ofAddress ? allowance.addressMessage : allowance.message,
    limitPerDay: ofAddress ? allowance.perAddress : allowance.perUser,
    retryAfterSec: verdict.retryAfterSec,
  });
  const addressLook = addressKey === undefined ? {} : lookHere(deps, addressKey, allowance.perAddress, DAY_MS);
  if (addressLook.verdict) return refusal(addressLook.verdict, true);
  const user = await takeToken(deps, userKey, allowance.perUser, DAY_MS);
  if (!user.allowed) {
    // The address's re-ask, if this request was handed it, was not made: the next request makes it (review 119: a user
    // whose own day was spent, asking every few seconds, kept the address refused here for the day).
    // Only if nobody took it since (review 121: a slow refusal handed back another request's re-ask, and one more asked).
    const { reask } = addressLook;
    if (reask && reask.refusal.checked === reask.marked) reask.refusal.checked = reask.checked;
    return refusal(user, false);
  }
  if (addressKey === undefined) return undefined;
  // Not through the cache again: the look above has just judged it (and sent this request to ask the database).
  const address = await countHit(deps, addressKey, allowance.perAddress, DAY_MS);
  if (address.allowed) return undefined;
  await refundToken(deps, userKey);
  return refusal(address, true);
}

/**
 * Gives back what `takeUserAndAddressAllowance` took for a request that then turned out to make nothing (a free start
 * of a tier the user already has, or refused for a live subscription of the agent; billing/checkout.ts).
 */
export async function giveBackUserAndAddressAllowance(
  deps: { database: { db: Db }; clock: Clock },
  asker: Asker,
  allowance: UserAndAddressAllowance,
  userKey: string,
): Promise<void> {
  await refundToken(deps, userKey);
  const addressKey = addressKeyOf(asker, allowance);
  if (addressKey !== undefined) await refundToken(deps, addressKey);
}

/** The address's count of a kind: for the user's own credentials from a known address (none for an agent's token). */
function addressKeyOf(asker: Asker, allowance: UserAndAddressAllowance): string | undefined {
  return asker.agentId || asker.address === undefined ? undefined : `${allowance.kind}|address|${asker.address}`;
}
