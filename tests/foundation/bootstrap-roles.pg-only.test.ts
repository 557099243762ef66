import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findPostgresBin, startPostgres, type PostgresServer } from '../../scripts/postgres-server.ts';
import { openPostgres, rows, sql } from '../../functions/platform/db.ts';
import { loadMigrations, migrate } from '../../functions/platform/migrations.ts';
import { eventually, statementsWaitingForLock, withDatabase } from '../support/databases.ts';

/**
 * Two services on two databases of one new PostgreSQL cluster (say, staging and production, or two marketplaces),
 * starting at once. The API roles (anon, authenticated, service_role) belong to the cluster, while the migration
 * runner's turn is an advisory lock, which holds within one database only. So both starts can find a role missing and
 * create it. This needs a cluster of its own: the shared test server's roles exist already.
 */

let server: PostgresServer;

beforeAll(async () => {
  if (!findPostgresBin()) throw new Error('this test starts its own PostgreSQL cluster: install the PostgreSQL server binaries');
  server = await startPostgres();
  const admin = postgres(server.url, { max: 1, onnotice: () => {} });
  try {
    await admin`create database first_marketplace`;
    await admin`create database second_marketplace`;
  } finally {
    await admin.end();
  }
}, 120_000);

afterAll(() => server?.stop());

describe('services starting at once on two databases of one new cluster', () => {
  it('the later start waits for the earlier one to create a role, then starts without creating it again', async () => {
    const first = openPostgres(withDatabase(server.url, 'first_marketplace'), { max: 2 });
    const second = openPostgres(withDatabase(server.url, 'second_marketplace'), { max: 3 });
    try {
      let secondStart: Promise<string[]> | undefined;
      // The first service is mid-start: its bootstrap has created the role `anon` and not committed yet.
      await first.db.transaction().execute(async (firstStart) => {
        await sql`create role anon nologin noinherit`.execute(firstStart);
        secondStart = migrate(second);
        secondStart.catch(() => {}); // awaited below; no unhandled rejection while the first start is held
        // (the bootstrap script is one statement, shown by its first 1,024 characters: the runner's turn)
        await eventually('the second start waits for the first one\'s role', async () => (await statementsWaitingForLock(second.db, '%supabase_migrations%')) > 0);
      }); // commits

      // Before the fix the second start failed here: 23505 on pg_authid_rolname_index, and the service crashed.
      const applied = await secondStart!;
      expect(applied).toEqual((await loadMigrations()).map((m) => m.version));
      const roles = await rows<{ rolname: string }>(
        second.db,
        sql`select rolname from pg_roles where rolname in ('anon', 'authenticated', 'service_role') order by rolname`,
      );
      expect(roles.map((r) => r.rolname)).toEqual(['anon', 'authenticated', 'service_role']);

      // and the first service's own start, which finds every role there, completes too
      expect(await migrate(first)).toHaveLength((await loadMigrations()).length);
    } finally {
      await first.close();
      await second.close();
    }
  }, 120_000);
});
