import type { AppDeps } from './platform/app-types.ts';
import { CursorSigner } from './http/pagination.ts';
import { systemClock, type Clock } from './platform/clock.ts';
import type { Config } from './platform/config.ts';
import type { Database } from './platform/db.ts';
import type { Logger } from './platform/logger.ts';
import { createAuth, createAuthenticator, ensureAdmin, ensureSigningKey, type PasswordHashing } from './auth/index.ts';
import { startHousekeeping } from './internal/index.ts';
import { startBillingRounds } from './billing/index.ts';
import { createPayments } from './platform/stripe.ts';
import { createMailer, type MailFiles, type MailTransport } from './platform/mailer.ts';
import { createStorage, type FileStore } from './platform/storage.ts';
import { createWebhookWorker } from './webhooks/index.ts';

/**
 * Builds the application's dependencies from configuration. Runtime-neutral: the Node entry, the Deno edge
 * entry and the tests all call this, passing their own database (and tests their own clock).
 */
export interface BuildOptions {
  config: Config;
  database: Database;
  logger: Logger;
  clock?: Clock;
  /** Serves the /docs page's script from here instead of the CDN (Node: see platform/node-runtime.ts). */
  docsScript?: () => Promise<Uint8Array>;
  /** Replaces SMTP/log delivery of the mail outbox (tests). */
  mailTransport?: MailTransport;
  /**
   * Where logged mails are also written whole, so their links can be opened (Node entry: `<DATA_DIR>/mail`, see
   * platform/mail-files.ts; tests: a temporary directory). Used only without SMTP and outside production.
   */
  mailFiles?: MailFiles;
  /** Disk for local uploads when no S3 is configured (Node entry and tests; the edge has none). */
  fileStore?: FileStore;
  /**
   * Whether startup() starts the in-process loops (mail, webhooks, housekeeping, unclaimed purchases). Default:
   * outside tests. The edge entry passes false: an isolate lives for a request or a few minutes, so its work is run by
   * the scheduler (POST /internal/drain, functions/internal/), never by a loop.
   */
  backgroundLoops?: boolean;
  /**
   * Tests only: a cheaper password hash than the library's scrypt (N=16384, r=16, 32 MiB and 100-400 ms of a core per
   * hash or check, by design). Every test account signs up and in over HTTP, thousands a run, and those hashes were
   * about a third of the suite's CPU on the 2-core CI machine (README, Tests). No entry point that serves users passes it
   * (scripts/serve.ts, the edge entry, the seed); tests/identity/password-hashing.test.ts shows that an app built
   * without it stores the library's own hashes.
   */
  passwordHashing?: PasswordHashing;
}

export interface BuiltDeps extends AppDeps {
  /** Work to do once before serving (ensure the admin account, seed demo data). */
  startup?: () => Promise<void>;
  /**
   * Stops what startup started (the mail and webhook loops, the housekeeping, the undo of unclaimed purchases)
   * and waits for work in flight. Call it before closing the database: a loop still polling a closed or dropped
   * database fails noisily.
   */
  shutdown: () => Promise<void>;
}

export async function buildDeps(options: BuildOptions): Promise<BuiltDeps> {
  const { config, database, logger } = options;
  const clock = options.clock ?? systemClock;
  const mailer = createMailer({
    config,
    db: database.db,
    logger,
    clock,
    files: options.mailFiles,
    ...(options.mailTransport ? { transport: options.mailTransport } : {}),
  });
  const auth = createAuth({ config, database, logger, clock, mailer, passwordHashing: options.passwordHashing });
  const authenticator = createAuthenticator({ auth, db: database.db, config, clock, logger });
  // Agent webhooks: drainWebhookOutbox does the work; this loop only calls it (tests call it themselves).
  const webhookWorker = createWebhookWorker({ database, clock, logger, config });
  const payments = await createPayments(config);
  let stopHousekeeping: (() => Promise<void>) | undefined;
  let stopBilling: (() => Promise<void>) | undefined;
  return {
    config,
    database,
    logger,
    clock,
    auth,
    mailer,
    payments,
    authenticator,
    startup: async () => {
      await ensureSigningKey(auth, database);
      if (config.admin) await ensureAdmin({ auth, database, logger, clock, config }, config.admin);
      // The Node entry's convenience loops. Tests deliver explicitly (tests/support/mail.ts); the edge leaves the
      // work to the scheduler (backgroundLoops: false).
      if (options.backgroundLoops ?? config.env !== 'test') {
        mailer.start();
        webhookWorker.start();
        // Expired sessions, tokens and codes, done mails, webhook history: what pg_cron's job does, where it runs too.
        stopHousekeeping = startHousekeeping({ database, logger });
        // Anonymous purchases nobody claimed, refunded and canceled; deleted agents' subscriptions set to end (what POST
        // /internal/drain also does).
        if (payments) stopBilling = startBillingRounds({ config, database, logger, clock, mailer, payments, auth });
      }
    },
    // Every part at once (review 25): each stops taking new work now, and the waits for work in flight overlap; one
    // after another, the webhook drains went on claiming while the mailer's stop waited for its send.
    shutdown: async () => {
      const stops = [stopHousekeeping?.(), stopBilling?.(), mailer.stop(), webhookWorker.stop()];
      stopHousekeeping = undefined;
      stopBilling = undefined;
      await Promise.all(stops);
    },
    cursors: new CursorSigner(config.authSecret),
    storage: createStorage(config, options.fileStore),
    files: options.fileStore,
    startedAt: new Date(),
    docsScript: options.docsScript,
  };
}
