import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { first, openPostgres, sql, type Database, type Db } from '../../functions/platform/db.ts';
import { openPGlite } from '../../functions/platform/pglite.ts';
import { migrate } from '../../functions/platform/migrations.ts';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, inject } from 'vitest';

/**
 * Fresh, migrated databases for tests, one per test file (or per test), on the tier chosen by the vitest
 * project: TEST_DB=postgres (a real server; each database is a copy of a migrated template, made by
 * global-setup) or TEST_DB=pglite (in-process; each instance loads a migrated data-dir snapshot).
 */

export type TestTier = 'postgres' | 'pglite';

export function testTier(): TestTier {
  const tier = process.env.TEST_DB;
  if (tier !== 'postgres' && tier !== 'pglite') throw new Error('TEST_DB must be postgres or pglite (run tests with npm test)');
  return tier;
}

export interface TestDatabase {
  database: Database;
  /** Connection string of this database (postgres tier only): for a second connection, psql, or pgbench. */
  url: string | undefined;
  drop(): Promise<void>;
}

export async function createTestDatabase(): Promise<TestDatabase> {
  if (testTier() === 'postgres') {
    const serverUrl = process.env.TEST_PG_URL!;
    const template = inject('pgTemplate');
    const name = `t_${randomUUID().replace(/-/g, '')}`;
    const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
    try {
      await admin.unsafe(`create database ${name} template ${template}`);
    } finally {
      await admin.end();
    }
    const url = withDatabase(serverUrl, name);
    const database = openPostgres(url, { max: 10 });
    return {
      database,
      url,
      drop: async () => {
        await database.close({ graceSeconds: 1 });
        const a = postgres(serverUrl, { max: 1, onnotice: () => {} });
        try {
          await a.unsafe(`drop database if exists ${name} with (force)`);
        } finally {
          await a.end();
        }
      },
    };
  }
  const snapshot = inject('pgliteSnapshot');
  const database = snapshot ? await openPGlite(undefined, { loadDataDir: snapshotOf(snapshot) }) : await openPGlite(undefined);
  if (!snapshot) await migrate(database);
  return { database, url: undefined, drop: () => database.close() };
}

/**
 * The migrated data-dir snapshot as PGlite's loadDataDir, its bytes read once per worker (a worker runs many files:
 * vitest.config.ts, isolate: false). PGlite reads it only through arrayBuffer(); Node's Blob answers that for a 45 MB
 * blob by reading it in 64 KB chunks and joining them, which with the file read was about 0.3 s of each test file's
 * start on this 2-core machine (a third of loading the snapshot, CPU profile): this Blob hands PGlite the bytes.
 */
class SnapshotBlob extends Blob {
  readonly #bytes: ArrayBuffer;
  constructor(bytes: ArrayBuffer) {
    super([]);
    this.#bytes = bytes;
  }
  override get size(): number {
    return this.#bytes.byteLength;
  }
  override arrayBuffer(): Promise<ArrayBuffer> {
    return Promise.resolve(this.#bytes);
  }
}
let snapshotRead: { file: string; blob: SnapshotBlob } | undefined;
function snapshotOf(file: string): Blob {
  if (snapshotRead?.file !== file) {
    const bytes = readFileSync(file);
    snapshotRead = { file, blob: new SnapshotBlob(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)) };
  }
  return snapshotRead.blob;
}

/**
 * A fresh, migrated database for the whole test file: created before its first test and dropped after its last.
 * Call it at the top level of the file; the returned function gives the handle once the tests run.
 */
export function useTestDatabase(): () => Db {
  let database: TestDatabase | undefined;
  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(() => database?.drop());
  return () => {
    if (!database) throw new Error('useTestDatabase: the database exists only inside the tests');
    return database.database.db;
  };
}

/**
 * Another instance's view of a test database (postgres tier): its own pool of connections to the same database, as a
 * second process of the service would have. Pass it to startTestApp({ testDatabase }); drop() closes only the pool.
 */
export function anotherInstance(db: TestDatabase, max = 4): TestDatabase {
  const database = openPostgres(db.url!, { max });
  return { database, url: db.url, drop: () => database.close() };
}

/** Waits until `done()` holds, checking every 25 ms for up to 30 s (a loaded CI machine). */
export async function eventually(what: string, done: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 1200; i++) {
    if (await done()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting until ${what}`);
}

/**
 * How many statements matching `pattern` (ILIKE) wait for a lock right now in this test's own database (other test
 * files share the server): how a race test knows its first party is held where it means to hold it.
 */
export async function statementsWaitingForLock(db: Db, pattern: string): Promise<number> {
  const row = await first<{ n: number }>(
    db,
    sql`select count(*)::int as n from pg_stat_activity
         where datname = current_database() and wait_event_type = 'Lock' and query ilike ${pattern}`,
  );
  return row!.n;
}

export function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

/** An empty database on the test server (postgres tier only): for checks that start from nothing. */
export async function createEmptyPostgresDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const serverUrl = process.env.TEST_PG_URL;
  if (!serverUrl) throw new Error('TEST_PG_URL is not set (the postgres tier of npm test sets it)');
  const name = `e_${randomUUID().replace(/-/g, '')}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`create database ${name}`);
  } finally {
    await admin.end();
  }
  return {
    url: withDatabase(serverUrl, name),
    drop: async () => {
      const a = postgres(serverUrl, { max: 1, onnotice: () => {} });
      try {
        await a.unsafe(`drop database if exists ${name} with (force)`);
      } finally {
        await a.end();
      }
    },
  };
}

/** A database with nothing in it (not migrated), on this test's tier; `drop()` closes and removes it. */
export async function emptyDatabase(): Promise<{ database: Database; drop(): Promise<void> }> {
  if (testTier() === 'pglite') {
    const database = await openPGlite(undefined);
    return { database, drop: () => database.close() };
  }
  const empty = await createEmptyPostgresDatabase();
  const database = openPostgres(empty.url, { max: 2 });
  return {
    database,
    drop: async () => {
      await database.close();
      await empty.drop();
    },
  };
}

/**
 * Runs `take` in a transaction of `on` (a connection of the test's own, beside the app's pool) and keeps that
 * transaction open, with the locks `take` took, until release(): how the race and fault tests hold a row or a table
 * while the app runs into it.
 */
export async function holdOpen(on: postgres.Sql, take: (tx: postgres.TransactionSql) => Promise<unknown>): Promise<{ release(): Promise<void> }> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let taken!: () => void;
  const isTaken = new Promise<void>((resolve) => (taken = resolve));
  const holder = on.begin(async (tx) => {
    await take(tx);
    taken();
    await released;
  });
  await Promise.race([isTaken, holder]);
  return {
    release: async () => {
      release();
      await holder;
    },
  };
}
