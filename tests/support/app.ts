import type { AddressInfo } from 'node:net';
import { createApp, type App } from '../../functions/app.ts';
import { buildDeps, type BuiltDeps } from '../../functions/deps.ts';
import { TestClock } from '../../functions/platform/clock.ts';
import { loadConfig } from '../../functions/platform/config.ts';
import type { Database, Db } from '../../functions/platform/db.ts';
import { memoryLogger } from '../../functions/platform/logger.ts';
import { envelopeHttpServer, localDocsScript } from '../../functions/platform/node-runtime.ts';
import { createTestDatabase, type TestDatabase } from './databases.ts';
import { HttpClient } from './http.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { diskFileStore } from '../../functions/platform/storage-disk.ts';
import { testPasswordHashing } from './password-hashing.ts';
import { mailFolder } from '../../functions/platform/mail-files.ts';

/**
 * The service as a test sees it: a fresh migrated database on the project's tier, the real app built by the
 * real buildDeps, listening on a real loopback port. Tests talk to it over HTTP through `http`.
 */
export interface TestApp {
  baseUrl: string;
  http: HttpClient;
  app: App;
  deps: BuiltDeps;
  database: Database;
  db: Db;
  /** Connection string of this test database (postgres tier only). */
  databaseUrl: string | undefined;
  clock: TestClock;
  logs: Array<Record<string, unknown>>;
  close(): Promise<void>;
}

export interface TestAppOptions {
  /** Extra environment (contract.md section 3 variables) for this app. */
  env?: Record<string, string | undefined>;
  /** Start time of the injected clock. */
  now?: Date | string;
  /** Reuse a database (e.g. to restart the app on the same data). */
  testDatabase?: TestDatabase;
  /** Mounts extra routes on the app before it starts serving (test-only routes that exercise the HTTP layer). */
  routes?: (app: App) => void;
  /** Where logged mails are written as files, as `npm start` writes them to .data/mail (none when unset). */
  mailDir?: string;
  /** Hash passwords as production does (the library's scrypt) instead of tests/support/password-hashing.ts. */
  libraryPasswordHashing?: boolean;
}

export const TEST_SECRET = 'test-secret-test-secret-test-secret-0123456789';

export async function startTestApp(options: TestAppOptions = {}): Promise<TestApp> {
  const testDatabase = options.testDatabase ?? (await createTestDatabase());
  // The port is bound first (port 0: the kernel picks a free one) and the app attached once built, since the
  // config needs the URL. Asking for a free port and binding it later raced with other test files (EADDRINUSE).
  let handle: (request: Request, env: unknown) => Response | Promise<Response> = () => new Response('starting', { status: 503 });
  const logger = memoryLogger();
  const server = envelopeHttpServer((request, env) => handle(request, env), logger);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const baseUrl = `http://127.0.0.1:${port}`;
  const config = loadConfig({
    NODE_ENV: 'test',
    PORT: String(port),
    PUBLIC_BASE_URL: baseUrl,
    AUTH_SECRET: TEST_SECRET,
    AUTH_RATE_LIMIT_PER_MINUTE: '0',
    ...options.env,
  });
  const docsScript = localDocsScript();
  const clock = new TestClock(options.now ? new Date(options.now) : new Date());
  // Local uploads go to a temporary directory per app (removed on close), as `npm start` uses .data/uploads.
  const uploadsDir = mkdtempSync(join(tmpdir(), 'mkt-uploads-'));
  // No background loops whatever NODE_ENV a test simulates: tests deliver mail and webhooks themselves. With a
  // production env the mail loop used to claim a mail first, so the test's own delivery pass found nothing (a flaky
  // failure in CI).
  const deps = await buildDeps({
    config, database: testDatabase.database, logger, clock, docsScript, fileStore: diskFileStore(uploadsDir), backgroundLoops: false,
    ...(options.libraryPasswordHashing ? {} : { passwordHashing: testPasswordHashing }),
    ...(options.mailDir ? { mailFiles: mailFolder(options.mailDir) } : {}),
  });
  const app = createApp(deps);
  options.routes?.(app);
  await deps.startup?.();
  // The auth library initialises in the background (schema check, OAuth resource seed); let it finish before
  // the test starts, so closing the database at the end never cuts one of its queries.
  await (deps as { auth?: { $context?: Promise<unknown> } }).auth?.$context;
  handle = (request, env) => app.fetch(request, env as never);
  return {
    baseUrl,
    http: new HttpClient(baseUrl),
    app,
    deps,
    database: testDatabase.database,
    db: testDatabase.database.db,
    databaseUrl: testDatabase.url,
    clock,
    logs: logger.lines,
    close: async () => {
      // Keep-alive sockets of the test's own HTTP client would otherwise hold close() open until they time out.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections?.();
      await closed;
      await deps.shutdown();
      rmSync(uploadsDir, { recursive: true, force: true });
      if (!options.testDatabase) await testDatabase.drop();
    },
  };
}
