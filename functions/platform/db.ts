import { CompiledQuery, Kysely, sql, type DatabaseConnection, type Driver, type RawBuilder } from 'kysely';
import { PostgresJSDialect } from 'kysely-postgres-js';
import { Buffer } from 'node:buffer';
import { isIP, Socket, connect as connectTcp } from 'node:net';
import { connect as connectTls, type ConnectionOptions, type TLSSocket } from 'node:tls';
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
 * in one statement would run into statement_timeout and the reply deadline, so it asks for the lock again every
 * 100 ms instead.
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
 *     connection. It is also the bound the reply deadline below is measured from.
 *   - idle_in_transaction_session_timeout: a transaction whose process stalled between two statements (a GC pause, a
 *     frozen container, a partition) ends, and with it the row locks it held for everybody else.
 * Migrations and seeds (runScript) run on a connection of their own without these bounds, and inTurn lifts the idle
 * one for its own transaction.
 */
export const CONNECTION_BOUNDS = { statement_timeout: 30_000, idle_in_transaction_session_timeout: 60_000 };

/** How much longer than statement_timeout a sent statement may go without a byte back before its connection is dead. */
const REPLY_GRACE_MS = 5_000;

export function openPostgres(url: string, options: { max?: number } = {}): Database {
  const settings = {
    max: options.max ?? 10,
    onnotice: () => {},
    types: { number8: numberType } as never,
    connection: { application_name: 'agent-marketplace', ...CONNECTION_BOUNDS },
  };
  // What postgres.js makes of the URL: hosts, sslmode, and the startup parameters (the URL's over ours). Making the
  // handle opens no connection.
  const parsed = postgres(url, settings).options as unknown as ParsedConnectOptions;
  const statementTimeoutMs = durationMs(parsed.connection.statement_timeout);
  // A reply deadline needs a bound on how long the server may legitimately stay silent: without statement_timeout
  // (0, or a value this does not understand) there is none, and no deadline either.
  const sockets = statementTimeoutMs ? socketsWithReplyDeadline(parsed.ssl, statementTimeoutMs + REPLY_GRACE_MS) : undefined;
  // With the sockets ours, TLS is negotiated by socketsWithReplyDeadline (postgres.js would wrap the socket it was given
  // in one of its own, out of the deadline's sight), so postgres.js itself is told there is none.
  const client = postgres(url, sockets ? ({ ...settings, ssl: false, socket: sockets.open } as typeof settings) : settings);
  const db = new Kysely<any>({ dialect: new RollbackSafePostgresJSDialect({ postgres: client }) });
  // Migrations and seeds: whole files whose statements (an index built over a big table) may run longer than any
  // request's, so they get a connection without the bounds above and without the reply deadline, opened when first
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
        connection: { application_name: 'agent-marketplace migrations' },
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
      sockets?.stop();
      await db.destroy();
    },
  };
}

/** The parts of postgres.js's parsed options a socket of ours needs (its typings do not list `socket` and TLS ones). */
interface ParsedConnectOptions {
  host: string[];
  port: number[];
  path: string | false | undefined;
  ssl: boolean | string | Record<string, unknown>;
  sslnegotiation: string | null;
  connect_timeout: number;
  connection: Record<string, unknown>;
}

/** A PostgreSQL duration setting (`30s`, `2min`, `500`: milliseconds without a unit) in milliseconds; undefined if not one. */
export function durationMs(value: unknown): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d)?\s*$/.exec(String(value ?? ''));
  if (!m) return undefined;
  const unit = { us: 0.001, ms: 1, s: 1_000, min: 60_000, h: 3_600_000, d: 86_400_000 }[(m[2] ?? 'ms') as 'ms'];
  return Number(m[1]) * unit;
}

/**
 * The pool's sockets, opened here so that a connection that goes silent is noticed (review 31). A failover to another
 * host, or a NAT or balancer that dropped its state, can leave a connection open with nobody behind it, no FIN, no RST:
 * a statement sent on it waited for the kernel to give up retransmitting (about 15 minutes on Linux), or for ever
 * behind a middlebox that still acknowledges, and the pool was soon made of such connections, every request of the
 * instance queued behind them. TCP keepalive does not help while data is unacknowledged, and Node offers no
 * TCP_USER_TIMEOUT.
 *
 * The rule: once bytes are sent, some byte must come back within `deadlineMs`. Everything postgres.js sends asks for an
 * answer (a Sync, a Flush, a simple query, the startup); the server answers a statement it runs within
 * statement_timeout, with its result or an error, so `deadlineMs` (statement_timeout and a grace) is never met by a
 * live server. Past it the socket is destroyed: what waited on it fails with CONNECTION_CLOSED, answered 503
 * (isConnectionLost), and the pool reconnects. The check runs on a timer and acts only when two checks in a row find
 * the same wait: between them the event loop has read its sockets, so an answer that had arrived while the loop was
 * busy is never mistaken for silence. Costs on the hot path: a field write per socket write and per read.
 *
 * TLS is negotiated here as postgres.js would (SSLRequest, or direct; the same `ssl` modes), so that the socket watched
 * is the one postgres.js reads and writes. A socket that cannot be opened is handed over failed rather than thrown:
 * postgres.js 3.4.9 leaves a connection whose socket factory threw in its connecting state for good, while a socket
 * that errors takes its ordinary path (the waiting query is rejected, the next one reconnects).
 */
function socketsWithReplyDeadline(ssl: ParsedConnectOptions['ssl'], deadlineMs: number) {
  interface Watched {
    socket: Socket;
    /** performance.now() of the first write since the last read; 0 when nothing waits for an answer. */
    waitingSince: number;
    /** The previous check already found this wait past the deadline. */
    overdue: boolean;
  }
  const watched = new Set<Watched>();
  let checks: ReturnType<typeof setInterval> | undefined;
  let opened = 0;

  function check() {
    const now = performance.now();
    for (const w of watched) {
      if (w.waitingSince === 0 || now - w.waitingSince < deadlineMs) continue;
      if (!w.overdue) {
        w.overdue = true;
        continue;
      }
      // Without an error: postgres.js then handles only the close, where it rejects what waited (CONNECTION_CLOSED)
      // and takes the connection out of the pool in one go. An 'error' comes a turn before the close, and a query
      // handed the connection in between (the caller retrying at once) would fail too.
      watched.delete(w);
      w.socket.destroy();
    }
  }

  function watch(socket: Socket): Socket {
    const w: Watched = { socket, waitingSince: 0, overdue: false };
    const write = socket.write as (...args: unknown[]) => boolean;
    socket.write = function (this: Socket, ...args: unknown[]) {
      if (w.waitingSince === 0) w.waitingSince = performance.now();
      return write.apply(this, args);
    } as Socket['write'];
    socket.on('data', () => {
      w.waitingSince = 0;
      w.overdue = false;
    });
    socket.once('close', () => {
      watched.delete(w);
      if (watched.size === 0 && checks) {
        clearInterval(checks);
        checks = undefined;
      }
    });
    watched.add(w);
    if (!checks) {
      checks = setInterval(check, Math.min(1_000, Math.max(50, deadlineMs / 4)));
      (checks as { unref?: () => void }).unref?.();
    }
    return socket;
  }

  return {
    open: async (o: ParsedConnectOptions): Promise<Socket> => {
      const i = opened++;
      const host = o.host[i % o.host.length]!;
      const port = o.port[i % o.port.length]!;
      try {
        const socket = await openSocket(o, host, port, ssl);
        // For postgres.js's connection errors (`write CONNECTION_CLOSED host:port`).
        Object.assign(socket, { host, port });
        return watch(socket);
      } catch (err) {
        // Fails with this error once postgres.js has put its listeners on it: at its first write (the startup
        // message), or on the next turn of the event loop, whichever comes first.
        const failed = new Socket();
        const fail = () => void (failed.destroyed || failed.destroy(err as Error));
        failed.write = (() => (fail(), false)) as Socket['write'];
        setTimeout(fail, 0);
        return failed;
      }
    },
    stop() {
      if (checks) clearInterval(checks);
      checks = undefined;
    },
  };
}

/** SSLRequest: length 8, code 80877103. */
const SSL_REQUEST = Buffer.from([0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);

/** A connected socket to one host of the URL, over TLS when `ssl` asks for it (postgres.js 3.4.9's secure(), replayed). */
async function openSocket(o: ParsedConnectOptions, host: string, port: number, ssl: ParsedConnectOptions['ssl']): Promise<Socket> {
  const raw = o.path ? connectTcp(o.path) : connectTcp(port, host);
  const deadline = Date.now() + (o.connect_timeout || 30) * 1000;
  try {
    await next(raw, 'connect', deadline, host, port);
    if (!ssl) return raw;
    const direct = o.sslnegotiation === 'direct';
    if (!direct) {
      raw.write(SSL_REQUEST);
      const [answer] = (await next(raw, 'data', deadline, host, port)) as [Buffer];
      // 'S': go on in TLS; anything else: the server has none, which only `prefer` accepts.
      if (answer[0] !== 0x53) {
        if (ssl === 'prefer') return raw;
        throw Object.assign(new Error(`the server at ${host}:${port} does not accept SSL connections`), { code: 'ECONNREFUSED' });
      }
    }
    const tls: ConnectionOptions = { socket: raw, servername: isIP(host) ? undefined : host };
    if (direct) tls.ALPNProtocols = ['postgresql'];
    if (ssl === 'require' || ssl === 'allow' || ssl === 'prefer') tls.rejectUnauthorized = false;
    else if (typeof ssl === 'object') Object.assign(tls, ssl);
    const secure: TLSSocket = connectTls(tls);
    try {
      await next(secure, 'secureConnect', deadline, host, port);
    } catch (err) {
      secure.destroy();
      throw err;
    }
    return secure;
  } catch (err) {
    raw.destroy();
    throw err;
  }
}

/** The next `event` of a socket being opened, or its error, its close, or the connect timeout. */
function next(socket: Socket, event: string, deadline: number, host: string, port: number): Promise<unknown[]> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => done(Object.assign(new Error(`connecting to ${host}:${port} timed out`), { code: 'CONNECT_TIMEOUT' })),
      Math.max(0, deadline - Date.now()),
    );
    const onEvent = (...args: unknown[]) => done(undefined, args);
    const onError = (err: Error) => done(err);
    const onClose = () => done(Object.assign(new Error(`the connection to ${host}:${port} closed while opening`), { code: 'CONNECTION_CLOSED' }));
    function done(err: Error | undefined, args: unknown[] = []) {
      clearTimeout(timer);
      socket.off(event, onEvent).off('error', onError).off('close', onClose);
      if (err) reject(err);
      else resolve(args);
    }
    socket.once(event, onEvent).once('error', onError).once('close', onClose);
  });
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
 * Socket errors, postgres.js connection errors (CONNECTION_CLOSED also when the pool's reply deadline gives up a
 * socket), PostgreSQL's "terminating connection" (class 57P), and a statement the server ended for taking too long:
 * statement_timeout (or an operator's cancel, 57014) and lock_timeout (55P03). The last two are bounds of
 * CONNECTION_BOUNDS and of the usage batches (review 31): the database did not serve the statement in time, which a
 * retry may well get past.
 */
const lostConnectionCodes = new Set([
  'ECONNRESET', 'EPIPE', 'ECONNREFUSED', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH',
  'CONNECTION_CLOSED', 'CONNECTION_DESTROYED', 'CONNECTION_ENDED', 'CONNECT_TIMEOUT',
  '57P01', '57P02', '57P03', '57014', '55P03',
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
