/**
 * Supabase Edge Function entry (Deno): the same application as `npm start`, over postgres.js.
 * Only relative and bare imports (mapped to `npm:` in deno.json beside this file): jsr: and deno.land
 * imports are not used, and nothing Node-only is loaded at import time (tests/foundation/edge.test.ts
 * runs `deno check` on this file and serves it under Deno against a real PostgreSQL).
 *
 * Environment: DATABASE_URL, or SUPABASE_DB_URL which Supabase sets for every function; AUTH_SECRET;
 * PUBLIC_BASE_URL = https://<project-ref>.supabase.co/functions/v1/api; the rest as in README.md.
 * Supabase hands the function its requests with the function name in the path (`/api/health`): that prefix
 * is removed before routing (FUNCTION_PATH_PREFIX, default `/api`; empty to keep paths as they are).
 */
import { createApp } from '../../../functions/app.ts';
import { buildDeps } from '../../../functions/deps.ts';
import { startingHandler } from '../../../functions/health/starting.ts';
import { ConfigError, loadConfig } from '../../../functions/platform/config.ts';
import { isConnectionLost, openPostgres } from '../../../functions/platform/db.ts';
import { createLogger } from '../../../functions/platform/logger.ts';

const env = Deno.env.toObject();
const logger = createLogger();

// What surviveLostDatabaseConnections does for the Node entry (functions/platform/node-runtime.ts): postgres.js leaves
// some of its own promises without a handler (the array-types query of a new connection, porsager/postgres#1192), so a
// database that refuses or drops connections would end the isolate through an unhandled rejection. Those are logged and
// the pool reconnects; any other unhandled rejection ends the isolate as Deno's default does.
globalThis.addEventListener('unhandledrejection', (event) => {
  if (!isConnectionLost(event.reason)) return;
  event.preventDefault();
  logger.warn('database connection lost; the pool reconnects', { err: event.reason });
});

function configure() {
  try {
    const config = loadConfig({ ...env, DATABASE_URL: env.DATABASE_URL || env.SUPABASE_DB_URL });
    // Supabase rewrites a function's text/html answer to a GET into text/plain ("HTML content is not supported"), so
    // the built-in sign-in, consent and billing pages would reach browsers as source text: a production edge sends
    // browsers to the front end instead. Outside production (supabase functions serve, the edge test) they are served.
    if (config.isProduction && !config.frontendUrl) {
      throw new ConfigError([
        'FRONTEND_URL: is required on the edge in production (Supabase serves HTML from a function as text/plain, so the built-in pages cannot be shown)',
      ]);
    }
    return config;
  } catch (err) {
    if (err instanceof ConfigError) logger.error('invalid configuration', { problems: err.problems });
    throw err;
  }
}

const config = configure();
if (!config.databaseUrl) {
  throw new Error('DATABASE_URL or SUPABASE_DB_URL must be set: the edge has no embedded database');
}
// Few connections per isolate: Supabase runs many isolates against one database.
const database = openPostgres(config.databaseUrl, { max: 3 });
const startedAt = new Date();
const starting = startingHandler({ config, logger, startedAt });

/**
 * The application and its start-up work (the signing key, the admin account), once per isolate, begun at boot and
 * begun again by the next request after a failure. The isolate serves from its first moment, as `npm start` does
 * (review 89: the entry awaited this before Deno.serve, so a new isolate whose database was down died at boot and
 * every request to it went unanswered): /health answers at once, and every other request waits for the start-up and
 * answers 503 UNAVAILABLE with Retry-After if it fails. A failed start-up is built anew, not retried: the auth library
 * keeps the failure of its own first database work, and would answer with it for the isolate's life.
 */
let app: ReturnType<typeof createApp> | undefined;
let startingUp: Promise<void> | undefined;
function startUp(): Promise<void> {
  startingUp ??= (async () => {
    // No loops in an isolate: the scheduler runs the background work (pg_cron -> POST /internal/drain; README.md).
    const deps = await buildDeps({ config, database, logger, backgroundLoops: false });
    deps.startedAt = startedAt;
    const built = createApp(deps);
    await deps.startup?.();
    app = built;
    logger.info('ready', { database: 'postgres', seconds: (Date.now() - startedAt.getTime()) / 1000 });
  })().catch((err) => {
    startingUp = undefined;
    logger.error('start-up failed; requests answer 503 until it succeeds', { err });
    throw err;
  });
  return startingUp;
}
startUp().catch(() => {}); // logged above

const prefix = (env.FUNCTION_PATH_PREFIX ?? '/api').replace(/\/+$/, '');

function withoutPrefix(request: Request): Request {
  if (!prefix) return request;
  const url = new URL(request.url);
  if (url.pathname !== prefix && !url.pathname.startsWith(`${prefix}/`)) return request;
  url.pathname = url.pathname.slice(prefix.length) || '/';
  return new Request(url, request);
}

async function handle(request: Request): Promise<Response> {
  const routed = withoutPrefix(request);
  if (!app) {
    if (new URL(routed.url).pathname === '/health') return starting(routed);
    try {
      await startUp();
    } catch {
      return starting(routed);
    }
  }
  return app!.fetch(routed);
}

Deno.serve({ port: config.port, onListen: ({ hostname, port }) => logger.info('listening', { hostname, port, database: 'postgres' }) }, handle);
