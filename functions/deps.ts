import type { AppDeps } from './app.ts';
import { CursorSigner } from './http/pagination.ts';
import { systemClock, type Clock } from './platform/clock.ts';
import type { Config } from './platform/config.ts';
import type { Database } from './platform/db.ts';
import type { Logger } from './platform/logger.ts';

/**
 * Builds the application's dependencies from configuration. Runtime-neutral: the Node entry, the Deno edge
 * entry and the tests all call this, passing their own database (and tests their own clock).
 */
export interface BuildOptions {
  config: Config;
  database: Database;
  logger: Logger;
  clock?: Clock;
  docsScriptUrl?: string;
}

export interface BuiltDeps extends AppDeps {
  /** Work to do once before serving (ensure the admin account, seed demo data). */
  startup?: () => Promise<void>;
}

export async function buildDeps(options: BuildOptions): Promise<BuiltDeps> {
  const { config, database, logger } = options;
  return {
    config,
    database,
    logger,
    clock: options.clock ?? systemClock,
    cursors: new CursorSigner(config.authSecret),
    startedAt: new Date(),
    docsScriptUrl: options.docsScriptUrl,
    // Replaced by the Better Auth authenticator (functions/auth) in the identity work.
    authenticator: { authenticate: async () => null },
  };
}
