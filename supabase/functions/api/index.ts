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
import { ConfigError, loadConfig } from '../../../functions/platform/config.ts';
import { openPostgres } from '../../../functions/platform/db.ts';
import { createLogger } from '../../../functions/platform/logger.ts';

const env = Deno.env.toObject();
const logger = createLogger();

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
// No loops in an isolate: the scheduler runs the background work (pg_cron -> POST /internal/drain; README.md).
const deps = await buildDeps({ config, database, logger, backgroundLoops: false });
const app = createApp(deps);
await deps.startup?.();

const prefix = (env.FUNCTION_PATH_PREFIX ?? '/api').replace(/\/+$/, '');

function withoutPrefix(request: Request): Request {
  if (!prefix) return request;
  const url = new URL(request.url);
  if (url.pathname !== prefix && !url.pathname.startsWith(`${prefix}/`)) return request;
  url.pathname = url.pathname.slice(prefix.length) || '/';
  return new Request(url, request);
}

Deno.serve({ port: config.port, onListen: ({ hostname, port }) => logger.info('listening', { hostname, port, database: 'postgres' }) }, (request) =>
  app.fetch(withoutPrefix(request)),
);
