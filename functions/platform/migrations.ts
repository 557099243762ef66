import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { rows, sql, type Database } from './db.ts';

/**
 * Applies supabase/migrations/*.sql in file order and records each in supabase_migrations.schema_migrations,
 * the table the Supabase CLI keeps, with the same columns and values (version = the timestamp prefix, name =
 * the rest of the file name), so `supabase db push` and this runner agree about what is applied.
 * Before the migrations it runs sql/bootstrap.sql, which creates what Supabase provides (roles, auth helpers)
 * only where it is missing.
 */

export interface Migration {
  version: string;
  name: string;
  sql: string;
}

const here = new URL('.', import.meta.url).pathname;
export const migrationsDir = join(here, '../../supabase/migrations');
export const bootstrapFile = join(here, '../../sql/bootstrap.sql');

export async function loadMigrations(dir = migrationsDir): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => /^\d+_.+\.sql$/.test(f)).sort();
  return Promise.all(
    files.map(async (file) => {
      const [, version, name] = /^(\d+)_(.+)\.sql$/.exec(file)!;
      return { version: version!, name: name!, sql: await readFile(join(dir, file), 'utf8') };
    }),
  );
}

// The Supabase CLI's own history table definition (pkg/migration/history.go), kept identical.
const historyTable = `
  create schema if not exists supabase_migrations;
  create table if not exists supabase_migrations.schema_migrations (version text not null primary key);
  alter table supabase_migrations.schema_migrations add column if not exists statements text[];
  alter table supabase_migrations.schema_migrations add column if not exists name text;
`;

export async function appliedVersions(database: Database): Promise<Set<string>> {
  await database.runScript(historyTable);
  const applied = await rows<{ version: string }>(
    database.db,
    sql`select version from supabase_migrations.schema_migrations`,
  );
  return new Set(applied.map((r) => r.version));
}

export async function migrate(
  database: Database,
  options: { migrations?: Migration[]; log?: (line: string) => void } = {},
): Promise<string[]> {
  const log = options.log ?? (() => {});
  await database.runScript(await readFile(bootstrapFile, 'utf8'));
  const migrations = options.migrations ?? (await loadMigrations());
  const applied = await appliedVersions(database);
  const done: string[] = [];
  for (const m of migrations) {
    if (applied.has(m.version)) continue;
    await database.runScript(m.sql, [
      {
        text: 'insert into supabase_migrations.schema_migrations (version, name, statements) values ($1, $2, $3)',
        values: [m.version, m.name, [m.sql]],
      },
    ]);
    log(`applied migration ${m.version}_${m.name}`);
    done.push(m.version);
  }
  return done;
}
