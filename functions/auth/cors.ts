import type { MiddlewareHandler } from 'hono';
import { cors } from 'hono/cors';
import type { AppEnv } from '../platform/app-types.ts';
import { setResponseHeader } from '../http/response-headers.ts';
import type { Config } from '../platform/config.ts';
import { trustedOrigins } from './better-auth.ts';

/**
 * CORS for the marketplace front end (FRONTEND_URL) and the service's own origin: the same trusted origins
 * the session cookie and the origin checks use. Credentials are allowed, so the front end can send the
 * session cookie from another origin (production: SameSite=None; Secure). Other origins get no CORS headers,
 * so a browser on another site cannot read any response.
 */
export function trustedOriginCors(config: Config): MiddlewareHandler<AppEnv> {
  const allowed = new Set(trustedOrigins(config));
  const exposed = ['X-Request-Id', 'Retry-After', 'X-Quota-Limit', 'X-Quota-Remaining', 'X-Idempotent-Replay'];
  const preflight = cors({
    origin: (origin) => (allowed.has(origin) ? origin : null),
    credentials: true,
    allowMethods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'],
    allowHeaders: ['Content-Type', 'Authorization', 'X-Request-Id'],
    exposeHeaders: exposed,
    maxAge: 600,
  });
  const exposeHeaders = exposed.join(',');
  // Other requests get the same headers Hono's cors would set, but only once the response exists: Hono's sets
  // them on an empty response before the handler runs, and merging that into the handler's response makes
  // @hono/node-server build a full WHATWG Response (a measurable share of a usage increment's CPU).
  return async (c, next) => {
    if (c.req.method === 'OPTIONS') return preflight(c, next);
    await next();
    const origin = c.req.header('origin');
    if (origin && allowed.has(origin)) setResponseHeader(c, 'Access-Control-Allow-Origin', origin);
    setResponseHeader(c, 'Access-Control-Allow-Credentials', 'true');
    setResponseHeader(c, 'Access-Control-Expose-Headers', exposeHeaders);
    setResponseHeader(c, 'Vary', 'Origin', { append: true });
  };
}
