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
 *
 * The pool's bounds (CONNECTION_BOUNDS) would cut a turn short: the transaction sits idle while `work` runs, as long as
 * the work takes, so it lifts idle_in_transaction_session_timeout for itself; and waiting for another instance's turn
 * in one statement would run into statement_timeout, so it asks for the lock again every 100 ms instead.
 */
export async function inTurn<T>(database: Database, name: string, work: () => Promise<T>): Promise<T> {
  if (database.kind === 'pglite') return work();
  return database.db.transaction().execute(async (turn) => {
    for (;;) {
      const got = await first<{ taken: boolean }>(
        turn,
        sql`select set_config('idle_in_transaction_session_timeout', '0', true), pg_try_advisory_xact_lock(hashtextextended(${name}, 0)) as taken`,
      );
      if (got?.taken) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return work();
  });
}

/** int8 and numeric come back as JS numbers on both drivers (counters and sums stay far below 2^53). */
const numberType = { to: 20, from: [20, 1700], serialize: (v: unknown) => String(v), parse: (v: string) => Number(v) };

/**
 * Server-side bounds of every connection of the pool, in milliseconds, sent as startup parameters (no statement of
 * their own). A parameter of the same name in DATABASE_URL's query string replaces the value here (postgres.js passes
 * the query's unknown keys to the server, after ours), e.g. `?statement_timeout=2min`; docs/operations.md.
 *   - statement_timeout: no request needs a statement anywhere near this long (admin analytics: well under a second
 *     on 100k subscriptions); one that runs this long is ended (57014, answered 503) instead of holding its
 *     connection.
 *   - idle_in_transaction_session_timeout: a transaction whose process stalled between two statements (a GC pause, a
 *     frozen container, a partition) ends, and with it the row locks it held for everybody else.
 * Migrations and seeds (runScript) run on a connection of their own without these bounds, and inTurn lifts the idle
 * one for its own transaction.
 *
 * Not bounded here: a connection that goes silent with no reset (a failover whose old host vanished, a NAT or
 * balancer that dropped its state). A statement sent on it waits until the kernel gives up retransmitting (about 15
 * minutes with Linux's default net.ipv4.tcp_retries2 = 15). A reply deadline of our own was built and taken out (a
 * review found it missed replies that stopped half way and cut statements queued in a pooler; it had to copy
 * postgres.js's TLS negotiation to watch the socket): docs/operations.md says what bounds it in a deployment.
 */
export const CONNECTION_BOUNDS = { statement_timeout: 30_000, idle_in_transaction_session_timeout: 60_000 };

/**
 * Every connection of the service (the pool's and the migrations') works in UTC, whatever the server's or the
 * database's TimeZone (initdb takes the host's): PostgreSQL adds days to a timestamptz, truncates one to a day and
 * prints one in the session's TimeZone, and the marketplace's boundaries (analytics windows, retention, periods) are
 * UTC ones (docs/admin.md); a server in Europe/Berlin moved the admin funnel's 30-day window by an hour across a
 * daylight-saving change (review 98). A startup parameter, so no statement of its own; PGlite is started the same way
 * (platform/pglite.ts).
 */
export const SESSION_TIME_ZONE = { TimeZone: 'UTC' };

export function openPostgres(url: string, options: { max?: number } = {}): Database {
  const client = postgres(url, {
    max: options.max ?? 10,
    onnotice: () => {},
    types: { number8: numberType } as never,
    connection: { application_name: 'agent-marketplace', ...SESSION_TIME_ZONE, ...CONNECTION_BOUNDS },
  });
  const db = new Kysely<any>({ dialect: new RollbackSafePostgresJSDialect({ postgres: client }) });
  // Migrations and seeds: whole files whose statements (an index built over a big table) may run longer than any
  // request's, so they get a connection without the bounds above, opened when first
  // needed and closed when idle (an instance runs them at start).
  let maintenance: postgres.Sql | undefined;
  return {
    db,
    kind: 'postgres',
    runScript: async (script, followUps = []) => {
      maintenance ??= postgres(url, {
        max: 1,
        idle_timeout: 5,
        onnotice: () => {},
        types: { number8: numberType } as never,
        connection: { application_name: 'agent-marketplace migrations', ...SESSION_TIME_ZONE },
      });
      await maintenance.begin(async (tx) => {
        // Over anything the URL or the role sets: a migration is not a request.
        await tx.unsafe(`set local statement_timeout = 0; set local idle_in_transaction_session_timeout = 0; set local lock_timeout = 0`);
        await tx.unsafe(script);
        for (const f of followUps) await tx.unsafe(f.text, f.values as never[]);
      });
    },
    // Bounded: a connection some library still holds reserved must not keep shutdown (or a test) waiting.
    close: async (options = {}) => {
      await Promise.all([client.end({ timeout: options.graceSeconds ?? 5 }), maintenance?.end({ timeout: options.graceSeconds ?? 5 })]);
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

/**
 * Socket and name-resolution errors (a database host that does not resolve during a failover, or its container down),
 * postgres.js connection errors, PostgreSQL's connection exceptions (class 08) and "terminating connection" (class
 * 57P), a server out of connection slots or memory (53300, 53200: many instances, or a deploy briefly doubling them,
 * reach max_connections; review 36 found every usage call then answered 500, which the SDK does not retry), and a
 * statement the server ended for taking too long: statement_timeout (or an operator's cancel, 57014) and lock_timeout
 * (55P03). The last two are bounds of CONNECTION_BOUNDS and of the usage batches (review 31): the database did not
 * serve the statement in time, which a retry may well get past.
 */
const lostConnectionCodes = new Set([
  'ECONNRESET', 'EPIPE', 'ECONNREFUSED', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENETDOWN', 'EHOSTDOWN',
  'ENOTFOUND', 'EAI_AGAIN',
  'CONNECTION_CLOSED', 'CONNECTION_DESTROYED', 'CONNECTION_ENDED', 'CONNECT_TIMEOUT',
  '08000', '08001', '08003', '08004', '08006',
  '57P01', '57P02', '57P03', '53300', '53200', '57014', '55P03',
]);

/**
 * Whether an error means the database could not serve the statement right now, not that it was a bad one: the
 * connection was lost (a restart, failover or network cut) or the statement ran past its bound. Answered 503
 * UNAVAILABLE with Retry-After; nothing of the failed transaction was kept.
 */
export function isConnectionLost(err: unknown): boolean {
  return err instanceof Error && lostConnectionCodes.has(String((err as { code?: unknown }).code));
}

/** A lock wait that ran into lock_timeout (55P03): the row is held by another transaction, for longer than allowed. */
export function isLockTimeout(err: unknown): boolean {
  return String((err as { code?: unknown } | null)?.code) === '55P03';
}

/**
 * A transaction PostgreSQL ended so that it may be run again: a serialization failure (40001, also raised on purpose,
 * e.g. by a usage counter carried to a new subscription) or a deadlock (40P01). Nothing it wrote is kept.
 */
export function isTransientConflict(err: unknown): boolean {
  const code = String((err as { code?: unknown } | null)?.code);
  return code === '40001' || code === '40P01';
}
