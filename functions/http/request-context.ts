import type { Context, MiddlewareHandler } from 'hono';
import { matchedRoutes } from 'hono/route';
import type { AppDeps, AppEnv } from '../platform/app-types.ts';
import { setResponseHeader } from './response-headers.ts';

/**
 * First middleware of the app: gives the request its id (the client's, echoed as contract.md says, when it is
 * printable ASCII of at most 256 characters: trace ids such as `Root=1-...;Parent=...` or base64 are; control
 * characters, other text and longer values get a new UUID instead, so a log line stays one bounded line), puts the dependencies on the context, and after the response is made sets `X-Request-Id` on it and
 * writes the one log line of the request. Runs for every response, including 404, 413, 500 and /api/auth.
 *
 * The log line never holds a secret from the URL (contract.md, Trust boundaries): password-reset links carry
 * their token in the path (`/api/auth/reset-password/<token>`), verification links and OAuth redirects carry
 * tokens, codes and states in the query. So the line has the route pattern (`route`), the path with every
 * segment that is not part of that pattern replaced by the parameter's name unless it is an id (a UUID), and only
 * the names of the query parameters (`query`), never their values. See `loggedUrl`.
 */
const clientRequestId = /^[\x21-\x7e](?:[\x20-\x7e]{0,254}[\x21-\x7e])?$/;

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
      const url = loggedUrl(c);
      deps.logger.info('request', {
        requestId,
        method: c.req.method,
        route: url.route,
        path: url.path,
        ...(url.query ? { query: url.query } : {}),
        status: c.res.status,
        durationMs: Math.round((performance.now() - started) * 100) / 100,
        ...(principal ? { userId: principal.userId, via: principal.via } : {}),
      });
    }
  };
}

export interface LoggedUrl {
  /** The route pattern that handled the request (`/agents/:agentId`, `/api/auth/reset-password/:token`); null on 404. */
  route: string | null;
  /** The path, with whatever the route pattern does not fix replaced by the parameter's name, except ids (UUIDs). */
  path: string;
  /** Names of the query parameters, never their values; undefined when there is no query. */
  query?: string[] | undefined;
}

/** What of this request's URL may be logged (also for error lines: functions/app.ts). */
export function loggedUrl(c: Context<AppEnv>): LoggedUrl {
  let route = handlerRoute(c);
  const path = c.req.path;
  if (route === null || route.includes('*')) {
    const auth = c.var.deps?.auth as unknown as AuthApi | undefined;
    if (auth && path.startsWith(AUTH_BASE + '/')) route = authLibraryRoute(auth, path) ?? route;
  }
  const q = c.req.url.indexOf('?');
  return { route, path: redactPath(path, route), query: q >= 0 ? queryNames(c.req.url.slice(q + 1)) : undefined };
}

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** A segment of a path no route knows, kept only when it cannot be a token: lowercase words, no digits. */
const plainWord = /^[a-z._-]{1,40}$/;

/**
 * The path with every segment the route pattern does not fix replaced by `:name` (its parameter) or `:redacted`
 * (past a wildcard, or no route), unless it is a UUID (our ids) or, where no pattern says, a plain lowercase word.
 */
export function redactPath(path: string, route: string | null): string {
  const segments = path.split('/');
  const pattern = route ? route.split('/') : [];
  return segments
    .map((segment, i) => {
      if (segment === '' || uuid.test(segment)) return segment;
      const p = pattern[i];
      if (p !== undefined && p !== '*' && !p.startsWith(':') && !pattern.slice(0, i).includes('*')) {
        return p === segment ? segment : ':redacted';
      }
      if (p !== undefined && p.startsWith(':')) return p.replace(/\{.*\}$/, '');
      return plainWord.test(segment) ? segment : ':redacted';
    })
    .join('/');
}

/** Parameter names of a query string; a name that could itself be a secret (not plain letters) is not kept. */
function queryNames(query: string): string[] | undefined {
  if (query === '') return undefined;
  return query
    .split('&')
    .filter((part) => part !== '')
    .map((part) => {
      const eq = part.indexOf('=');
      let name = eq >= 0 ? part.slice(0, eq) : part;
      try {
        name = decodeURIComponent(name.replace(/\+/g, ' '));
      } catch {
        return '?';
      }
      return /^[A-Za-z_]{1,32}$/.test(name) ? name : '?';
    });
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

const AUTH_BASE = '/api/auth';

type AuthApi = { api: Record<string, { path?: unknown }> };
type CompiledRoute = { pattern: string; matcher: RegExp };
const authRoutes = new WeakMap<object, CompiledRoute[]>();

/**
 * The auth library's own endpoint pattern for a path under /api/auth (`/api/auth/reset-password/:token`), read
 * from the library's endpoint list, so a parameter it puts in a path is known to be one. Literal paths first.
 */
function authLibraryRoute(auth: AuthApi, path: string): string | null {
  let compiled = authRoutes.get(auth);
  if (!compiled) {
    const patterns = new Set<string>();
    for (const endpoint of Object.values(auth.api ?? {})) {
      if (typeof endpoint?.path === 'string' && endpoint.path.startsWith('/')) patterns.add(endpoint.path);
    }
    compiled = [...patterns]
      .sort((a, b) => Number(a.includes(':')) - Number(b.includes(':')))
      .map((pattern) => ({
        pattern: AUTH_BASE + pattern,
        matcher: new RegExp(
          '^' + pattern.split('/').map((s) => (s.startsWith(':') ? '[^/]+' : s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))).join('/') + '/?$',
        ),
      }));
    authRoutes.set(auth, compiled);
  }
  const rest = path.slice(AUTH_BASE.length);
  return compiled.find((r) => r.matcher.test(rest))?.pattern ?? null;
}
