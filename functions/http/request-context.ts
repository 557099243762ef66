import type { Context, MiddlewareHandler } from 'hono';
import { matchedRoutes } from 'hono/route';
import type { AppDeps } from '../app.ts';
import type { AppEnv } from './context.ts';
import { setResponseHeader } from './response-headers.ts';

/**
 * First middleware of the app: gives the request its id (the client's when it is a sane token, else a new
 * UUID), puts the dependencies on the context, and after the response is made sets `X-Request-Id` on it and
 * writes the one log line of the request. Runs for every response, including 404, 413, 500 and /api/auth.
 */
const clientRequestId = /^[\w.:-]{1,128}$/;

export function requestContext(deps: AppDeps): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const started = performance.now();
    const incoming = c.req.header('x-request-id');
    const requestId = incoming && clientRequestId.test(incoming) ? incoming : crypto.randomUUID();
    c.set('requestId', requestId);
    c.set('deps', deps);
    try {
      await next();
    } finally {
      setResponseHeader(c, 'X-Request-Id', requestId);
      const principal = await c.get('principal')?.catch(() => null);
      deps.logger.info('request', {
        requestId,
        method: c.req.method,
        route: handlerRoute(c),
        path: c.req.path,
        status: c.res.status,
        durationMs: Math.round((performance.now() - started) * 100) / 100,
        ...(principal ? { userId: principal.userId, via: principal.via } : {}),
      });
    }
  };
}

/**
 * The route pattern that handles this request (`/agents/:agentId`), or null when none matched (404).
 * Middleware is registered for every method (`ALL`); the handler is the last route matched for a real method.
 * Known even when a middleware answered first (e.g. 413 before the handler ran).
 */
function handlerRoute(c: Context<AppEnv>): string | null {
  const routes = matchedRoutes(c);
  for (let i = routes.length - 1; i >= 0; i--) {
    if (routes[i]!.method !== 'ALL') return routes[i]!.path;
  }
  return null;
}
