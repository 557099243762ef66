import { availableParallelism } from 'node:os';
import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Two projects run the same suite: `postgres` against a real PostgreSQL server (TEST_PG_URL, started by
 * scripts/test.ts) and `pglite` against the embedded database. scripts/test.ts picks which run.
 * `*.pg-only.test.ts` need a server, or drive Chromium where the database tier changes nothing the browser shows (run
 * on both, they cost CI about 50 s a second time), or check a data migration's fix of rows on a database migrated to
 * just before it (migrating PGlite from nothing costs about 5 s a file; every migration still runs on PGlite in
 * tests/foundation/migrations.test.ts), and run in `postgres` only; `*.once.test.ts` need no database at all (type
 * check, Deno, a child process, the Stripe fake) and run once, in `pglite`, the project that always runs.
 */
const common = {
  include: ['tests/**/*.test.ts'],
  globalSetup: ['tests/support/global-setup.ts'],
  testTimeout: 30_000,
  hookTimeout: 60_000,
  pool: 'forks' as const,
  // One worker process runs many files, one after another, without loading the service's modules again for each:
  // loading them was about a quarter of the suite's time (import 205-234 s of ~800 s on the 2-core CI machine; 18 s
  // without isolation, the whole suite ~595 s instead of ~780 s). What this asks of a test file: it closes what it
  // opens (apps, servers, databases, browsers; afterAll) and leaves no state behind in a module. The service keeps
  // none that outlives its app (per-app state is in WeakMaps keyed by the app's objects), and the tests hold theirs
  // in the file's own variables.
  isolate: false,
};

export default defineConfig({
  test: {
    // Vitest's default is one worker per core minus one: a single worker on a 2-core CI machine, idle while a
    // test waits on the PostgreSQL server, Chromium or a child process. Two or more keep the cores busy.
    maxWorkers: Number(process.env.TEST_WORKERS) || Math.max(2, availableParallelism()),
    projects: [
      { test: { ...common, name: 'postgres', env: { TEST_DB: 'postgres' }, exclude: [...configDefaults.exclude, 'tests/**/*.once.test.ts'] } },
      { test: { ...common, name: 'pglite', env: { TEST_DB: 'pglite' }, exclude: [...configDefaults.exclude, 'tests/**/*.pg-only.test.ts'] } },
    ],
  },
});
