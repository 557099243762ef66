import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql, type Database } from '../../functions/platform/db.ts';
import { loadMigrations, migrate, splitStatements, type Migration } from '../../functions/platform/migrations.ts';
import { emptyDatabase } from '../support/databases.ts';
import { startTestApp, type TestApp } from '../support/app.ts';

/**
 * supabase/migrations apply on both databases (PostgreSQL 15 server and PGlite), in order, recorded in the
 * Supabase CLI's history table, and only once. The schema rules every migration must follow are checked here
 * for all of them, so a new migration that breaks one fails in the foundation suite.
 */

type HistoryRow = { version: string; name: string; statements: string[] };
const history = (db: Database) =>
  rows<HistoryRow>(db.db, sql`select version, name, statements from supabase_migrations.schema_migrations order by version`);

let migrations: Migration[];
let t: TestApp;
beforeAll(async () => {
  migrations = await loadMigrations();
  t = await startTestApp();
});
afterAll(() => t.close());


describe('migrating an empty database', () => {
  it('applies every migration in file order, records each, and applies nothing the second time', async () => {
    const { database, drop } = await emptyDatabase();
    try {
      const applied = await migrate(database);
      expect(applied).toEqual(migrations.map((m) => m.version));
      expect([...applied].sort()).toEqual(applied);
      expect(await migrate(database)).toEqual([]);
      expect((await history(database)).map((r) => r.version)).toEqual(applied);
    } finally {
      await drop();
    }
  }, 60_000);
});

describe('the migrated test database', () => {
  it('records version, name and the statements as the Supabase CLI writes them', async () => {
    const recorded = await history(t.database);
    expect(recorded).toEqual(
      migrations.map((m) => ({ version: m.version, name: m.name, statements: splitStatements(m.sql) })),
    );
  });

  it('has nothing left to apply', async () => {
    expect(await migrate(t.database)).toEqual([]);
  });

  it('a failing migration changes nothing and is not recorded', async () => {
    const broken: Migration = {
      version: '29991231000000',
      name: 'broken',
      sql: 'create table public.half_done (id int);\nselect 1 / 0;',
    };
    await expect(migrate(t.database, { migrations: [...migrations, broken] })).rejects.toThrow(/division by zero/);
    const leftovers = await rows(t.db, sql`select 1 from pg_class where relname = 'half_done'`);
    expect(leftovers).toEqual([]);
    expect((await history(t.database)).map((r) => r.version)).not.toContain(broken.version);
  });
});

describe('what sql/bootstrap.sql provides', () => {
  it('creates the Supabase API roles', async () => {
    const roles = await rows<{ rolname: string }>(
      t.db,
      sql`select rolname from pg_roles where rolname in ('anon', 'authenticated', 'service_role') order by rolname`,
    );
    expect(roles.map((r) => r.rolname)).toEqual(['anon', 'authenticated', 'service_role']);
  });

  it('auth.jwt() reads the request claims as PostgREST sets them, and is {} without them', async () => {
    const claims = await t.db.transaction().execute(async (trx) => {
      await sql`select set_config('request.jwt.claims', ${JSON.stringify({ sub: 'user-1', role: 'authenticated' })}, true)`.execute(trx);
      return (await sql<{ sub: string }>`select auth.jwt() ->> 'sub' as sub`.execute(trx)).rows[0]?.sub;
    });
    expect(claims).toBe('user-1');
    const none = await rows<{ claims: unknown }>(t.db, sql`select auth.jwt() as claims`);
    expect(none[0]?.claims).toEqual({});
  });

  it('running it again changes nothing (every statement only creates what is missing)', async () => {
    await expect(migrate(t.database)).resolves.toEqual([]);
  });
});

describe('schema rules every migration follows', () => {
  it('row-level security is enabled on every table in public', async () => {
    const open = await rows<{ table: string }>(
      t.db,
      sql`select c.relname as "table" from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'public' and c.relkind in ('r', 'p') and not c.relrowsecurity order by 1`,
    );
    expect(open.map((r) => r.table)).toEqual([]);
  });
});
