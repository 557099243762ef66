import { describe, expect, it } from 'vitest';
import { openPostgres, rows, sql } from '../../functions/platform/db.ts';
import { loadMigrations, migrate } from '../../functions/platform/migrations.ts';
import { createEmptyPostgresDatabase } from '../support/databases.ts';

/**
 * Several instances of the service starting together on one new database (a deploy of three replicas): each runs
 * the migrations at start. They take turns, every migration is applied exactly once, and no instance fails.
 * (PGlite is one process's own database, so this is PostgreSQL's alone.)
 */
describe('instances migrating one database at once', () => {
  it('all three start; each migration is applied once, by one of them', async () => {
    const migrations = await loadMigrations();
    const empty = await createEmptyPostgresDatabase();
    const instances = [0, 1, 2].map(() => openPostgres(empty.url, { max: 2 }));
    try {
      const lines: string[] = [];
      const results = await Promise.allSettled(instances.map((database) => migrate(database, { log: (line) => lines.push(line) })));
      expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
      const appliedBy = results.flatMap((r) => (r.status === 'fulfilled' ? r.value : []));
      expect(appliedBy.sort()).toEqual(migrations.map((m) => m.version));
      const history = await rows<{ version: string }>(
        instances[0]!.db,
        sql`select version from supabase_migrations.schema_migrations order by version`,
      );
      expect(history.map((r) => r.version)).toEqual(migrations.map((m) => m.version));
      // a later start finds nothing to do
      expect(await migrate(instances[1]!)).toEqual([]);
    } finally {
      await Promise.all(instances.map((database) => database.close()));
      await empty.drop();
    }
  }, 120_000);
});
