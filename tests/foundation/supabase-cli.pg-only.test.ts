import { readFile } from 'node:fs/promises';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres, rows, sql, type Database } from '../../functions/platform/db.ts';
import { bootstrapFile, loadMigrations, migrate, splitStatements, type Migration } from '../../functions/platform/migrations.ts';
import { generateDatabaseTypes, plainUrl, projectCopy, supabaseCli, typesFile } from '../../scripts/supabase-cli.ts';
import { createEmptyPostgresDatabase } from '../support/databases.ts';

/**
 * Our migration runner and the real Supabase CLI agree (pg-only: the CLI talks to a PostgreSQL server over the
 * network; PGlite is in-process). Both directions: a database pushed by `supabase db push` has nothing left for
 * our runner, and a database migrated by our runner shows every migration applied in `supabase migration list`.
 * The history rows are identical, and the committed database types match what the CLI generates.
 */

type HistoryRow = { version: string; name: string; statements: string[] };

let migrations: Migration[];
let project: ReturnType<typeof projectCopy>;
let pushed: Awaited<ReturnType<typeof createEmptyPostgresDatabase>>;
let ours: Awaited<ReturnType<typeof createEmptyPostgresDatabase>>;
let pushedDb: Database;
let oursDb: Database;

const history = (db: Database) =>
  rows<HistoryRow>(db.db, sql`select version, name, statements from supabase_migrations.schema_migrations order by version`);

beforeAll(async () => {
  migrations = await loadMigrations();
  project = projectCopy();
  [pushed, ours] = await Promise.all([createEmptyPostgresDatabase(), createEmptyPostgresDatabase()]);
  // On Supabase the roles and auth helpers already exist; on a bare server the bootstrap provides them.
  const admin = postgres(pushed.url, { max: 1, onnotice: () => {} });
  await admin.unsafe(await readFile(bootstrapFile, 'utf8'));
  await admin.end();
  await supabaseCli(['db', 'push', '--db-url', plainUrl(pushed.url), '--yes'], project.dir);
  pushedDb = openPostgres(pushed.url, { max: 2 });
  oursDb = openPostgres(ours.url, { max: 2 });
  await migrate(oursDb);
}, 120_000);

afterAll(async () => {
  await pushedDb?.close();
  await oursDb?.close();
  await pushed?.drop();
  await ours?.drop();
  project?.remove();
});

describe('supabase db push, then our runner', () => {
  it('the CLI applied every migration', async () => {
    expect((await history(pushedDb)).map((r) => r.version)).toEqual(migrations.map((m) => m.version));
  });

  it('our runner finds nothing left to apply', async () => {
    expect(await migrate(pushedDb)).toEqual([]);
  });
});

describe('our runner, then supabase migration list', () => {
  it('lists every local migration as applied remotely', async () => {
    const { stdout } = await supabaseCli(['migration', 'list', '--db-url', plainUrl(ours.url)], project.dir);
    const listed = [...stdout.matchAll(/`?(\d{14})`?\s*\|\s*`?(\d{14})?`?\s*\|/g)].map((m) => ({ local: m[1], remote: m[2] }));
    expect(listed).toEqual(migrations.map((m) => ({ local: m.version, remote: m.version })));
  });

  it('a second db push has nothing to apply', async () => {
    const { stdout, stderr } = await supabaseCli(['db', 'push', '--db-url', plainUrl(ours.url), '--yes'], project.dir);
    expect(`${stdout}${stderr}`).not.toMatch(/Applying migration/);
    expect(`${stdout}${stderr}`).toMatch(/up to date/i);
  });
});

describe('history rows', () => {
  it('are identical whichever tool wrote them: version, name and the statements as the CLI splits them', async () => {
    const theirs = await history(pushedDb);
    const mine = await history(oursDb);
    expect(mine).toEqual(theirs);
    // And our splitter is what makes them equal, statement for statement.
    for (const m of migrations) {
      expect(theirs.find((r) => r.version === m.version)?.statements, m.version).toEqual(splitStatements(m.sql));
    }
  });
});

describe('database types', () => {
  it('supabase/database.types.ts is up to date with the migrations (run `npm run gen:types` after changing one)', async () => {
    const generated = await generateDatabaseTypes(pushed.url);
    const committed = await readFile(typesFile, 'utf8');
    expect(committed, 'supabase/database.types.ts is stale: run `npm run gen:types`').toBe(generated);
  });
});
