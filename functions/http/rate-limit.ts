import type { Context, MiddlewareHandler } from 'hono';
import type { AppEnv } from './context.ts';
import { ApiError } from './errors.ts';

/**
 * Request rate limits per client IP and endpoint (sign-in, sign-up, password reset, waitlist, public writes).
 * A fixed one-minute window per (bucket, client IP), counted in process memory: cheap, and enough for one
 * instance. Several instances each count on their own, so the effective limit is per instance (written down
 * in docs/identity.md). Time comes from `deps.clock`, so tests can move it.
 *
 * Use: `router.use('/path', rateLimit({ bucket: 'waitlist', perMinute: (deps) => deps.config.authRateLimitPerMinute }))`.
 * A limit of 0 disables the bucket.
 */

const WINDOW_MS = 60_000;
const MAX_KEYS = 50_000;

interface Window {
  start: number;
  count: number;
}

/** One store per running app (keyed by its deps object), so two apps in one process never share counts. */
const stores = new WeakMap<object, Map<string, Window>>();

export interface RateLimitOptions {
  /** Names the endpoint: counts are kept per bucket and client IP. */
  bucket: string;
  /** Allowed requests per minute per client IP; 0 disables. */
  perMinute: (deps: AppEnv['Variables']['deps']) => number;
}

export interface RateLimitVerdict {
  allowed: boolean;
  /** Seconds until the window resets (only meaningful when not allowed). */
  retryAfterSec: number;
}

/** Counts one request; pure apart from the store, exported for services that limit outside middleware. */
export function takeToken(store: Map<string, Window>, key: string, limit: number, nowMs: number): RateLimitVerdict {
  let w = store.get(key);
  if (!w || nowMs - w.start >= WINDOW_MS || nowMs < w.start) {
    if (store.size >= MAX_KEYS) prune(store, nowMs);
    w = { start: nowMs, count: 0 };
    store.set(key, w);
  }
  if (w.count >= limit) {
    return { allowed: false, retryAfterSec: Math.max(1, Math.ceil((w.start + WINDOW_MS - nowMs) / 1000)) };
  }
  w.count += 1;
  return { allowed: true, retryAfterSec: 0 };
}

function prune(store: Map<string, Window>, nowMs: number) {
  for (const [k, w] of store) if (nowMs - w.start >= WINDOW_MS) store.delete(k);
  // Still full (an address-spraying flood): start over rather than grow without bound.
  if (store.size >= MAX_KEYS) store.clear();
}

/** Throws 429 RATE_LIMITED (with Retry-After) when this client is over the bucket's limit. */
export function enforceRateLimit(c: Context<AppEnv>, bucket: string, limit: number): void {
  if (limit <= 0) return;
  const deps = c.var.deps;
  let store = stores.get(deps);
  if (!store) stores.set(deps, (store = new Map()));
  const verdict = takeToken(store, `${bucket}|${clientIp(c)}`, limit, deps.clock.now().getTime());
  if (!verdict.allowed) {
    throw new ApiError(
      'RATE_LIMITED',
      'Too many requests; try again later',
      { retryAfterSec: verdict.retryAfterSec, limitPerMinute: limit },
      { 'Retry-After': String(verdict.retryAfterSec) },
    );
  }
}

export function rateLimit(options: RateLimitOptions): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    enforceRateLimit(c, options.bucket, options.perMinute(c.var.deps));
    await next();
  };
}

/**
 * The client's IP address. The socket peer is the truth unless the peer is one of our own proxies: when it is
 * a loopback or private-network address (a reverse proxy or platform gateway in front of us), or unknown (the
 * edge runtime hides it), the rightmost X-Forwarded-For entry is used: the address that proxy saw, which
 * the client cannot forge (entries to its left can be). A public peer's X-Forwarded-For is ignored.
 */
export function clientIp(c: Context<AppEnv>): string {
  const peer = socketPeer(c);
  if (peer === undefined || isPrivateAddress(peer)) {
    const forwarded = c.req.header('x-forwarded-for');
    if (forwarded) {
      const parts = forwarded.split(',').map((s) => s.trim()).filter(Boolean);
      const last = parts[parts.length - 1];
      if (last) return last;
    }
  }
  return peer ?? 'unknown';
}

function socketPeer(c: Context<AppEnv>): string | undefined {
  const env = c.env as
    | { incoming?: { socket?: { remoteAddress?: string } }; remoteAddr?: { hostname?: string } }
    | undefined;
  const addr = env?.incoming?.socket?.remoteAddress ?? env?.remoteAddr?.hostname;
  return addr ? addr.replace(/^::ffff:/, '') : undefined;
}

export function isPrivateAddress(ip: string): boolean {
  if (ip === '::1' || ip === 'localhost') return true;
  const v4 = /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(ip);
  if (v4) {
    const [a, b] = [Number(v4[1]), Number(v4[2])];
    return a === 127 || a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168) || (a === 169 && b === 254);
  }
  const lower = ip.toLowerCase();
  return lower.startsWith('fc') || lower.startsWith('fd') || lower.startsWith('fe80:');
}
