import { PGlite, types } from '@electric-sql/pglite';
import { pgcrypto } from '@electric-sql/pglite/contrib/pgcrypto';
import {
  CompiledQuery,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type DatabaseConnection,
  type Driver,
  type QueryResult,
  type TransactionSettings,
} from 'kysely';
import type { Database } from './db.ts';

/**
 * Embedded Postgres (PGlite, in-process WASM). One connection: acquiring it takes a lock, so a transaction
 * owns the database until it commits, which is also how PGlite itself works.
 */
export async function openPGlite(dataDir: string | undefined, options: { loadDataDir?: Blob } = {}): Promise<Database & { pglite: PGlite }> {
  const pglite = new PGlite(dataDir ?? 'memory://', {
    extensions: { pgcrypto },
    // PostgreSQL's default 128 MB of shared buffers would live in the WebAssembly memory, which never shrinks
    // (about 140 MB more idle RSS): an embedded database's pages are in memory or the OS page cache anyway.
    // TimeZone: UTC, as every connection of the service to a PostgreSQL server (platform/db.ts SESSION_TIME_ZONE).
    startParams: [...PGlite.defaultStartParams, '-c', 'shared_buffers=16MB', '-c', 'TimeZone=UTC'],
    parsers: { [types.INT8]: (v: string) => Number(v), [types.NUMERIC]: (v: string) => Number(v) },
    ...(options.loadDataDir ? { loadDataDir: options.loadDataDir } : {}),
  });
  await pglite.waitReady;
  const db = new Kysely<any>({
    dialect: {
      createAdapter: () => new PostgresAdapter(),
      createDriver: () => new PGliteDriver(pglite),
      createIntrospector: (k) => new PostgresIntrospector(k),
      createQueryCompiler: () => new PostgresQueryCompiler(),
    },
  });
  return {
    db,
    pglite,
    kind: 'pglite',
    runScript: async (script, followUps = []) => {
      const conn = await db.getExecutor().provideConnection(async () => {
        await pglite.transaction(async (tx) => {
          await tx.exec(script);
          for (const f of followUps) await tx.query(f.text, f.values);
        });
      });
      return conn;
    },
    close: async () => {
      await db.destroy();
      if (!pglite.closed) await pglite.close();
    },
  };
}

class PGliteDriver implements Driver {
  #queue: Promise<void> = Promise.resolve();
  readonly #connection: PGliteConnection;

  constructor(pglite: PGlite) {
    this.#connection = new PGliteConnection(pglite);
  }

  async init(): Promise<void> {}

  async acquireConnection(): Promise<DatabaseConnection> {
    let release!: () => void;
    const previous = this.#queue;
    this.#queue = new Promise<void>((resolve) => (release = resolve));
    await previous;
    this.#connection.release = release;
    return this.#connection;
  }

  async beginTransaction(conn: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    const level = settings.isolationLevel ? ` isolation level ${settings.isolationLevel}` : '';
    await conn.executeQuery(CompiledQuery.raw(`begin${level}`));
  }

  async commitTransaction(conn: DatabaseConnection): Promise<void> {
    await conn.executeQuery(CompiledQuery.raw('commit'));
  }

  async rollbackTransaction(conn: DatabaseConnection): Promise<void> {
    await conn.executeQuery(CompiledQuery.raw('rollback'));
  }

  async releaseConnection(): Promise<void> {
    this.#connection.release();
  }

  async destroy(): Promise<void> {}
}

class PGliteConnection implements DatabaseConnection {
  release: () => void = () => {};
  private readonly pglite: PGlite;
  constructor(pglite: PGlite) {
    this.pglite = pglite;
  }

  async executeQuery<R>(compiledQuery: CompiledQuery): Promise<QueryResult<R>> {
    const result = await this.pglite.query<R>(compiledQuery.sql, [...compiledQuery.parameters]);
    return {
      rows: result.rows,
      ...(result.affectedRows !== undefined ? { numAffectedRows: BigInt(result.affectedRows) } : {}),
    };
  }

  // eslint-disable-next-line require-yield
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error('streaming is not supported on the embedded database');
  }
}
