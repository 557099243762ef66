import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { startingHandler } from '../functions/health/starting.ts';
import { ConfigError, loadConfig, type Config } from '../functions/platform/config.ts';
import type { Database } from '../functions/platform/db.ts';
import { exitIfDatabaseInUse } from '../functions/platform/embedded-database-lock.ts';
import { createLogger } from '../functions/platform/logger.ts';
import { STOP_WAIT_MS } from '../functions/platform/mailer.ts';
import { envelopeHttpServer, localDocsScript, openConfiguredDatabase, surviveLostDatabaseConnections, withPersistedSecret } from '../functions/platform/node-runtime.ts';
import { withDemoAdmin } from './demo-admin.ts';

/** How long a stop waits for the requests in flight to be answered (under Kubernetes' default 30 s grace). */
const REQUEST_DRAIN_MS = 25_000;

/**
 * Node entry: `npm start`. Binds the port first and answers /health (liveness) at once, then loads the
 * application, opens the database (creating the embedded one in .data/ on a first run), migrates it, runs the
 * start-up work (admin account, demo data) and from then on serves the whole API. Until then every other
 * path answers 503 UNAVAILABLE with Retry-After, and /ready says so too.
 */
type Handler = (request: Request, env?: unknown) => Response | Promise<Response>;

async function main() {
  const startedAt = new Date();
  const logger = createLogger();
  surviveLostDatabaseConnections(logger);
  let config: Config;
  let demoAdmin: ReturnType<typeof withDemoAdmin>['generated'];
  try {
    const admin = withDemoAdmin(withPersistedSecret(process.env));
    demoAdmin = admin.generated;
    config = loadConfig(admin.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
  const databaseKind = config.databaseUrl ? 'PostgreSQL (DATABASE_URL)' : `embedded PostgreSQL (PGlite) in ${config.dataDir}/pglite`;

  let handle: Handler = startingHandler({ config, logger, startedAt });
  let database: Database | undefined;
  let stopBackgroundWork: (() => Promise<void>) | undefined;
  const server = envelopeHttpServer((request, env) => handle(request, env), logger, config.host);
  server.listen(config.port, config.host, () => {
    const info = server.address() as AddressInfo;
    logger.info('listening', { url: config.publicBaseUrl, port: info.port, pid: process.pid, node: process.version });
    console.log(`\n  Agent Marketplace API listening on ${config.publicBaseUrl}  (docs: ${config.publicBaseUrl}/docs)`);
    console.log(`  Preparing the database: ${databaseKind} ...\n`);
  });
  server.on('error', (err) => {
    console.error(`Cannot listen on port ${config.port}: ${err.message}`);
    process.exit(1);
  });

  const shutdown = async (signal: string) => {
    logger.info('shutting down', { signal });
    // Whatever hangs (a query on a dead connection), the process is gone within 10 s of the longest wait of the
    // background work's stop: a mail being sent when the signal came is let finish (its deadline, 60 s) and recorded,
    // or another instance sends it again (review 25). It is usually done in well under a second.
    setTimeout(() => process.exit(0), STOP_WAIT_MS + 10_000).unref();
    // No new connection is taken; the requests in flight are answered before the database they need goes away, for up
    // to REQUEST_DRAIN_MS, beside the background work's stop (review 42: every request in flight when a rolling deploy
    // signalled was dropped without an answer). Idle keep-alive connections close now, the others after their answer.
    const answered = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    const drained = Promise.race([answered, new Promise<void>((resolve) => setTimeout(resolve, REQUEST_DRAIN_MS).unref())]);
    await Promise.all([drained, stopBackgroundWork?.()]);
    server.closeAllConnections();
    await database?.close();
    process.exit(0);
  };
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGTERM', () => void shutdown('SIGTERM'));

  // The application and its libraries load while the port already answers.
  const [{ createApp }, { buildDeps }, { migrate }] = await Promise.all([
    import('../functions/app.ts'),
    import('../functions/deps.ts'),
    import('../functions/platform/migrations.ts'),
  ]);
  database = await openConfiguredDatabase(config);
  const applied = await migrate(database, { log: (line) => logger.info(line) });
  logger.info('database ready', { kind: database.kind, appliedMigrations: applied.length });

  // Local uploads live in <dataDir>/uploads when no S3 is configured (catalog createUpload); without SMTP, mails are
  // also written to <dataDir>/mail outside production (the mailer decides), so their links can be opened.
  const [{ diskFileStore, defaultUploadsDir }, { mailFolder }] = await Promise.all([
    import('../functions/platform/storage-disk.ts'),
    import('../functions/platform/mail-files.ts'),
  ]);
  const deps = await buildDeps({
    config,
    database,
    logger,
    docsScript: localDocsScript(),
    fileStore: diskFileStore(defaultUploadsDir(config.dataDir)),
    mailFiles: mailFolder(join(config.dataDir, 'mail')),
  });
  deps.startedAt = startedAt;
  const app = createApp(deps);
  stopBackgroundWork = deps.shutdown;
  await deps.startup?.();
  // Development on an empty database: the demo catalog (scripts/seed.ts); never in production.
  if (config.env === 'development') await (await import('./seed.ts')).seedDemoCatalog(deps);
  handle = (request, env) => app.fetch(request, env as never);

  const seconds = ((Date.now() - startedAt.getTime()) / 1000).toFixed(1);
  logger.info('ready', { database: database.kind, seconds: Number(seconds) });
  console.log(`\n  Ready after ${seconds} s: the whole API is served from ${databaseKind}.\n`);
  if (demoAdmin?.created) {
    console.log(`  Demo admin created: ${demoAdmin.email} / ${demoAdmin.password}  (kept in ${demoAdmin.file})\n`);
  } else if (demoAdmin) {
    console.log(`  Demo admin: ${demoAdmin.email}  (password in ${demoAdmin.file})\n`);
  }
}

main().catch((err) => {
  exitIfDatabaseInUse(err); // another process has the embedded database open (a second `npm start` on one DATA_DIR)
  console.error(err);
  process.exit(1);
});
