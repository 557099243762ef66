import type { Auth } from '../auth/better-auth.ts';
import type { Authenticator, Principal } from '../http/context.ts';
import type { Clock } from './clock.ts';
import type { Config } from './config.ts';
import type { CursorSigner } from '../http/pagination.ts';
import type { Database } from './db.ts';
import type { FileStore, ObjectStorage } from './storage.ts';
import type { Logger } from './logger.ts';
import type { Mailer } from './mailer.ts';
import type { Payments } from './stripe.ts';

/**
 * Everything the application needs, built by functions/deps.ts and handed to createApp (functions/app.ts): the same
 * code serves Node (scripts/serve.ts), Deno (supabase/functions/api) and tests, each passing its own database,
 * clock and peers. Types only (nothing here runs): the rooms that take deps import this module, never the composition
 * root, which imports every room.
 */
export interface AppDeps {
  config: Config;
  database: Database;
  logger: Logger;
  clock: Clock;
  authenticator: Authenticator;
  /** Better Auth (sessions, admin, organizations, jwt, OAuth provider), served under /api/auth. */
  auth: Auth;
  mailer: Mailer;
  /** Stripe, or undefined without STRIPE_SECRET_KEY (paid paths then answer 503 PAYMENTS_NOT_CONFIGURED). */
  payments: Payments | undefined;
  cursors: CursorSigner;
  /** Agent media uploads: S3-compatible, or local files when `files` is injected; undefined -> 503 STORAGE_NOT_CONFIGURED. */
  storage: ObjectStorage | undefined;
  files?: FileStore | undefined;
  /** process start, for /health uptime */
  startedAt: Date;
  /** The /docs page's script (Node: vendor/swagger-ui/); when absent the page loads it from the public CDN. */
  docsScript?: (() => Promise<Uint8Array>) | undefined;
}

/** Hono's environment for every route: the request id, the deps, the memoized caller. */
export interface AppEnv {
  Variables: {
    requestId: string;
    deps: AppDeps;
    /** Memoized principal lookup for this request (see http/access.ts). */
    principal: Promise<Principal | null> | undefined;
  };
}
