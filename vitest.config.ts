import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Two projects run the same suite: `postgres` against a real PostgreSQL server (TEST_PG_URL, started by
 * scripts/test.ts) and `pglite` against the embedded database. scripts/test.ts picks which run.
 */
const common = {
  include: ['tests/**/*.test.ts'],
  globalSetup: ['tests/support/global-setup.ts'],
  testTimeout: 30_000,
  hookTimeout: 60_000,
  pool: 'forks' as const,
};

export default defineConfig({
  test: {
    projects: [
      { test: { ...common, name: 'postgres', env: { TEST_DB: 'postgres' } } },
      { test: { ...common, name: 'pglite', env: { TEST_DB: 'pglite' }, exclude: [...configDefaults.exclude, 'tests/**/*.pg-only.test.ts'] } },
    ],
  },
});
