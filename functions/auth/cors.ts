import { cors } from 'hono/cors';
import type { Config } from '../platform/config.ts';
import { trustedOrigins } from './better-auth.ts';

/**
 * CORS for the marketplace front end (FRONTEND_URL) and the service's own origin: the same trusted origins
 * the session cookie and the origin checks use. Credentials are allowed, so the front end can send the
 * session cookie from another origin (production: SameSite=None; Secure). Other origins get no CORS headers,
 * so a browser on another site cannot read any response.
 */
export function trustedOriginCors(config: Config) {
  const allowed = new Set(trustedOrigins(config));
  return cors({
    origin: (origin) => (allowed.has(origin) ? origin : null),
    credentials: true,
    allowMethods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'],
    allowHeaders: ['Content-Type', 'Authorization', 'X-Request-Id'],
    exposeHeaders: ['X-Request-Id', 'Retry-After', 'X-Quota-Limit', 'X-Quota-Remaining'],
    maxAge: 600,
  });
}
