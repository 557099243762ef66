import { CompiledQuery, Kysely, sql, type DatabaseConnection, type Driver, type RawBuilder } from 'kysely';
import { PostgresJSDialect } from 'kysely-postgres-js';
import postgres from 'postgres';

/**
 * The one SQL interface of the application: a Kysely handle used only through the `sql` tagged template
 * (parameterized plain SQL), shared with Better Auth so auth and app use the same connections.
 * Two implementations: postgres.js for any Postgres 15+ (DATABASE_URL) and PGlite in-process (see pglite.ts).
 *
 * Rule for PGlite: it has exactly one connection, so code inside a transaction must use the transaction
 * handle it was given, never the outer `db` (that would wait for the transaction forever).
 */
export type Db = Kysely<any>;

export interface Database {
  db: Db;
  kind: 'postgres' | 'pglite';
  /**
   * Runs a multi-statement SQL script (simple protocol) and then parameterized follow-up statements, all in one
   * transaction. Used by migrations and seeds, which are whole files rather than single statements.
   */
  runScript(script: string, followUps?: { text: string; values: unknown[] }[]): Promise<void>;
  /**
   * Closes the connections, waiting at most `graceSeconds` (default 5) for running queries; 0 closes at once.
   */
  close(options?: { graceSeconds?: number }): Promise<void>;
}

export { sql };
export type { RawBuilder };

/** Runs a query and returns its rows. */
export async function rows<T>(db: Db, query: RawBuilder<T>): Promise<T[]> {
  const result = await query.execute(db);
  return result.rows;
}

/** Runs a query and returns its first row, or undefined. */
export async function first<T>(db: Db, query: RawBuilder<T>): Promise<T | undefined> {
  const result = await query.execute(db);
  return result.rows[0];
}

/**
 * Start-up work that every instance runs and only one may do (the first signing key, the admin account, the demo seed):
 * runs `work` while a transaction of its own holds the advisory lock `name`, so instances starting together on one
 * database take turns and the later ones find the work done. `work` uses its own connections. The embedded database
 * is one process's, with one connection (holding a transaction there would leave `work` none), so it just runs.
 */
export async function inTurn<T>(database: Database, name: string, work: () => Promise<T>): Promise<T> {
  if (database.kind === 'pglite') return work();
  return database.db.transaction().execute(async (turn) => {
    await sql`select pg_advisory_xact_lock(hashtextextended(${name}, 0))`.execute(turn);
    return work();
  });
}

/** int8 and numeric come back as JS numbers on both drivers (counters and sums stay far below 2^53). */
const numberType = { to: 20, from: [20, 1700], serialize: (v: unknown) => String(v), parse: (v: string) => Number(v) };

export function openPostgres(url: string, options: { max?: number } = {}): Database {
  const client = postgres(url, {
    max: options.max ?? 10,
    onnotice: () => {},
    types: { number8: numberType } as never,
    connection: { application_name: 'agent-marketplace' },
  });
  const db = new Kysely<any>({ dialect: new RollbackSafePostgresJSDialect({ postgres: client }) });
  return {
    db,
    kind: 'postgres',
    runScript: async (script, followUps = []) => {
      await client.begin(async (tx) => {
        await tx.unsafe(script);
        for (const f of followUps) await tx.unsafe(f.text, f.values as never[]);
      });
    },
    // Bounded: a connection some library still holds reserved must not keep shutdown (or a test) waiting.
    close: async (options = {}) => {
      await client.end({ timeout: options.graceSeconds ?? 5 });
      await db.destroy();
    },
  };
}

/**
 * kysely-postgres-js 5.0.0 inherits Kysely 0.29's PostgresDriver.rollbackTransaction, which, when ROLLBACK fails,
 * marks the connection for discard through a method private to Kysely's own `pg` connections. Its connections have no
 * such method, so a transaction that lost its connection threw `TypeError: connection[PRIVATE_MARK_FOR_DISCARD_METHOD]
 * is not a function` (a 500) instead of the connection error (a 503). Here a failed ROLLBACK throws its own error; the
 * connection needs no discarding: a reservation whose connection closed is over (patches/postgres+3.4.9.patch), and
 * releasing it hands nothing back to the pool.
 */
class RollbackSafePostgresJSDialect extends PostgresJSDialect {
  override createDriver(): Driver {
    const driver = super.createDriver();
    driver.rollbackTransaction = async (connection: DatabaseConnection) => {
      await connection.executeQuery(CompiledQuery.raw('rollback'));
    };
    return driver;
  }
}

/** Socket errors, postgres.js connection errors, and PostgreSQL's "terminating connection" (class 57P). */
const lostConnectionCodes = new Set([
  'ECONNRESET', 'EPIPE', 'ECONNREFUSED', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH',
  'CONNECTION_CLOSED', 'CONNECTION_DESTROYED', 'CONNECTION_ENDED', 'CONNECT_TIMEOUT',
  '57P01', '57P02', '57P03',
]);

/** Whether an error means the database connection was lost (a restart, failover or network cut), not a bad query. */
export function isConnectionLost(err: unknown): boolean {
  return err instanceof Error && lostConnectionCodes.has(String((err as { code?: unknown }).code));
}

/**
 * A transaction PostgreSQL ended so that it may be run again: a serialization failure (40001, also raised on purpose,
 * e.g. by a usage counter carried to a new subscription) or a deadlock (40P01). Nothing it wrote is kept.
 */
export function isTransientConflict(err: unknown): boolean {
  const code = String((err as { code?: unknown } | null)?.code);
  return code === '40001' || code === '40P01';
}
