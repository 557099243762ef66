import type { Context, MiddlewareHandler } from 'hono';
import type { AppEnv } from '../platform/app-types.ts';
import { ApiError } from './errors.ts';
import { DAY_MS, takeToken, takeUserAndAddressAllowance, type Asker, type UserAndAddressAllowance } from '../platform/rate-limits.ts';
import { isInRanges, normalizeIp, rateLimitSubject } from '../platform/ip-ranges.ts';

// The counting itself (one statement per check, and the refusal cache) is platform/rate-limits.ts, which limits
// outside HTTP use too (failed password checks, account mails per recipient).
export { refundToken, takeToken, type Asker, type RateLimitVerdict } from '../platform/rate-limits.ts';

/**
 * Request rate limits per client address and endpoint (sign-in, sign-up, password reset, waitlist, public writes),
 * and the failed sign-ins per account (functions/auth/failed-sign-ins.ts), counted in PostgreSQL so that every
 * instance of the service shares one count: a fixed window per key that opens with the key's first request, checked
 * and counted in one statement (public.rate_limit_hit, migration 20261123000400). Time comes from `deps.clock`.
 *
 * In process there is only a cache of refusals (platform/rate-limits.ts): a key found over its limit is refused
 * locally until its window ends, so a flood from one address costs the database one statement per window, not one
 * per request. It never admits anything on its own: the database is the authority.
 *
 * Use: `router.use('/path', rateLimit({ bucket: 'waitlist', perMinute: (deps) => deps.config.authRateLimitPerMinute }))`
 * or `await enforceRateLimit(c, bucket, limit)`. A limit of 0 disables the bucket.
 */

const WINDOW_MS = 60_000;

export interface RateLimitOptions {
  /** Names the endpoint: counts are kept per bucket and client address. */
  bucket: string;
  /** Allowed requests per minute per client address; 0 disables. */
  perMinute: (deps: AppEnv['Variables']['deps']) => number;
}

export function rateLimited(retryAfterSec: number, message: string, details: Record<string, unknown>): ApiError {
  return new ApiError('RATE_LIMITED', message, { retryAfterSec, ...details }, { 'Retry-After': String(retryAfterSec) });
}

/**
 * Throws 429 RATE_LIMITED (with Retry-After) when this client address (an IPv6 client's /64: `rateLimitSubject`) is
 * over the bucket's limit.
 */
export async function enforceRateLimit(c: Context<AppEnv>, bucket: string, limit: number): Promise<void> {
  if (limit <= 0) return;
  const verdict = await takeToken(c.var.deps, `${bucket}|${clientSubject(c)}`, limit, WINDOW_MS);
  if (!verdict.allowed) {
    throw rateLimited(verdict.retryAfterSec, 'Too many requests; try again later', { limitPerMinute: limit });
  }
}

/**
 * Counts one request against a daily allowance that `key` names (the anonymous checkouts of a client address, say), in
 * PostgreSQL; throws 429 RATE_LIMITED with Retry-After and `details.limitPerDay` when it is used up.
 */
export async function enforceDailyAllowance(
  deps: Parameters<typeof takeToken>[0],
  key: string,
  limit: number,
  message: string,
): Promise<void> {
  const verdict = await takeToken(deps, key, limit, DAY_MS);
  if (!verdict.allowed) throw rateLimited(verdict.retryAfterSec, message, { limitPerDay: limit });
}

/**
 * Counts one request against a per-user daily allowance and, for the user's own credentials, its client address's
 * (platform/rate-limits.ts `takeUserAndAddressAllowance`); throws 429 RATE_LIMITED with Retry-After and
 * `details.limitPerDay` (the bound that refused) when either is used up.
 */
export async function enforceUserAndAddressAllowance(
  deps: Parameters<typeof takeToken>[0],
  asker: Asker,
  allowance: UserAndAddressAllowance,
  userKey: string,
): Promise<void> {
  const refused = await takeUserAndAddressAllowance(deps, asker, allowance, userKey);
  if (refused) throw rateLimited(refused.retryAfterSec, refused.message, { limitPerDay: refused.limitPerDay });
}

/** The caller as the per-user daily allowances count them: the principal, and this request's client address. */
export function askerOf<P extends { userId: string; agentId?: string | undefined }>(c: Context<AppEnv>, principal: P): P & Asker {
  return { ...principal, address: clientSubject(c) };
}

/** Whom a per-address limit counts for this request: its client address, or an IPv6 client's /64. */
export function clientSubject(c: Context<AppEnv>): string {
  return rateLimitSubject(clientIp(c));
}

export function rateLimit(options: RateLimitOptions): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    await enforceRateLimit(c, options.bucket, options.perMinute(c.var.deps));
    await next();
  };
}

/**
 * The client's address, as far as it can be known (contract.md, Trust boundaries):
 * - The socket peer is the client, unless the peer is one of TRUSTED_PROXIES (unset: none). A peer that is not
 *   trusted cannot make us believe anything with X-Forwarded-For or X-Real-IP, whatever its address.
 * - Behind trusted proxies: X-Forwarded-For read from the right (each proxy appends the address it saw), skipping
 *   the trusted hops; the first one that is not trusted is the client. Entries further left were written by the
 *   client and are ignored. X-Real-IP only when there is no X-Forwarded-For.
 * - On the edge (Supabase Edge Functions, Deno) the runtime gives no socket peer: the request comes from the
 *   platform's gateway, which sets X-Forwarded-For to the address it saw, so that header is the platform's own and
 *   is read the same way (rightmost entry not in TRUSTED_PROXIES). Put any proxy of yours in front of the gateway
 *   (a CDN) in TRUSTED_PROXIES.
 */
export function clientIp(c: Context<AppEnv>): string {
  const trusted = c.var.deps.config.trustedProxies;
  const peer = socketPeer(c);
  if (peer !== undefined && !isInRanges(peer, trusted)) return normalizeIp(peer) ?? peer;
  const forwarded = c.req.header('x-forwarded-for');
  if (forwarded) {
    const hops = forwarded.split(',').map((s) => s.trim()).filter(Boolean);
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = hops[i]!;
      if (i > 0 && isInRanges(hop, trusted)) continue;
      return normalizeIp(hop) ?? hop.slice(0, 64);
    }
  }
  if (peer !== undefined) {
    const realIp = normalizeIp(c.req.header('x-real-ip') ?? '');
    return realIp ?? normalizeIp(peer) ?? peer;
  }
  return 'unknown';
}

function socketPeer(c: Context<AppEnv>): string | undefined {
  const env = c.env as
    | { incoming?: { socket?: { remoteAddress?: string } }; remoteAddr?: { hostname?: string } }
    | undefined;
  return env?.incoming?.socket?.remoteAddress ?? env?.remoteAddr?.hostname ?? undefined;
}
