import { createServer, connect, type Server } from 'node:net';
import type { AddressInfo } from 'node:net';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createTestDatabase, holdOpen, type TestDatabase } from '../support/databases.ts';
import { startTcpProxy, throughProxy, type TcpProxy } from '../support/tcp-proxy.ts';

/**
 * A database connection lost under a request in flight (contract.md section 1: 503 UNAVAILABLE when the database
 * is unreachable), with real connections cut, not a thrown stand-in: the network drops (a TCP proxy between the
 * app and PostgreSQL that this test controls resets the sockets). The request in flight answers 503 UNAVAILABLE
 * with Retry-After and a warning in the log that names no database internals, and the next request succeeds on a
 * fresh connection.
 *
 * The server ending the app's backends (`pg_terminate_backend`, what a restart or failover does) is the second case.
 * Unpatched postgres.js 3.4.9 answers the first request 503, but Kysely's dialect runs every query on a reserved
 * connection, and a reserved connection whose backend died was released back into the pool without a socket: the
 * next query on it hung, or the driver threw an uncaught TypeError from nextWrite and the process ended
 * (porsager/postgres#1208, #1154; fixes open upstream, no release). patches/postgres+3.4.9.patch fixes the driver
 * (applied by `npm install`); the driver-level cases at the end of this file fail without it.
 *
 * The request is held in flight by a lock: the test takes an ACCESS EXCLUSIVE lock on public.agents, GET /agents
 * waits for it inside PostgreSQL, and the test cuts the connection once pg_stat_activity shows that wait.
 */

/** Holds an ACCESS EXCLUSIVE lock on public.agents (or `table`) until release() (a second, independent connection). */
async function lockAgents(url: string, table = 'public.agents'): Promise<{ release(): Promise<void> }> {
  const locker = postgres(url, { max: 1, onnotice: () => {}, connection: { application_name: 'outage-test-locker' } });
  const held = await holdOpen(locker, (tx) => tx.unsafe(`lock table ${table} in access exclusive mode`));
  return {
    release: async () => {
      await held.release();
      await locker.end();
    },
  };
}

/** Waits (polling pg_stat_activity, no fixed delay) until one of the app's backends waits for the lock. */
async function waitForBlockedAppQuery(admin: postgres.Sql, database: string): Promise<void> {
  for (;;) {
    const [row] = await admin`
      select count(*)::int as n from pg_stat_activity
      where datname = ${database} and application_name = 'agent-marketplace' and wait_event_type = 'Lock'`;
    if (row!.n > 0) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
}

function databaseName(url: string): string {
  return new URL(url).pathname.slice(1);
}

function expectUnavailable(t: TestApp, res: { status: number; headers: Headers; body: any; text: string }, requestId: string) {
  expect(res.status, res.text).toBe(503);
  expect(res.headers.get('retry-after')).toBe('1');
  expect(res.body).toStrictEqual({
    status: 'error',
    data: null,
    error: { code: 'UNAVAILABLE', message: expect.any(String), details: { requestId } },
  });
  // the client learns nothing about the database (host, port, driver message)
  expect(res.body.error.message).not.toMatch(/127\.0\.0\.1|terminat|postgres|CONNECTION_|ECONN|57P/i);
  expect(t.logs.find((l) => l.level === 'warn' && l.requestId === requestId)).toMatchObject({ msg: 'database connection lost during the request' });
  expect(t.logs.find((l) => l.level === 'error' && l.requestId === requestId)).toBeUndefined();
}

describe('the network drops the app\'s connections (a TCP proxy resets them) under a request in flight', () => {
  let t: TestApp;
  let admin: postgres.Sql;
  let proxy: TcpProxy;
  let direct: TestDatabase;
  beforeAll(async () => {
    direct = await createTestDatabase();
    const url = new URL(direct.url!);
    proxy = await startTcpProxy({ host: url.hostname, port: Number(url.port) });
    const proxied = throughProxy(direct.url!, proxy);
    const database = openPostgres(proxied, { max: 10 });
    t = await startTestApp({ testDatabase: { database, url: proxied, drop: () => database.close({ graceSeconds: 1 }) } });
    admin = postgres(direct.url!, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await admin?.end();
    await t?.close();
    await t?.database.close({ graceSeconds: 1 });
    await proxy?.close();
    await direct?.drop();
  });

  it('answers 503 UNAVAILABLE with Retry-After, and the next request succeeds through the same proxy', async () => {
    expect((await t.http.get('/agents')).status).toBe(200);
    const lock = await lockAgents(direct.url!);
    let inFlight: ReturnType<typeof t.http.get> | undefined;
    try {
      inFlight = t.http.get('/agents', { headers: { 'x-request-id': 'network-cut-1' } });
      await waitForBlockedAppQuery(admin, databaseName(direct.url!));
      expect(proxy.cut()).toBeGreaterThan(0);
      expectUnavailable(t, await inFlight, 'network-cut-1');
    } finally {
      await lock.release();
      await inFlight?.catch(() => undefined);
    }
    const next = await t.http.get('/agents');
    expect(next.status, next.text).toBe(200);
    expect(next.body.status).toBe('success');
    expect((await t.http.get('/ready')).status).toBe(200);
  });

  it('answers a request the auth library serves (sign-up) 503 UNAVAILABLE too, never the library\'s 500', async () => {
    const lock = await lockAgents(direct.url!, 'public."user"');
    let inFlight: ReturnType<typeof t.http.post> | undefined;
    try {
      inFlight = t.http.post('/api/auth/sign-up/email', {
        headers: { 'x-request-id': 'network-cut-auth' },
        json: { email: 'cut-sign-up@example.test', password: 'a long enough password', name: 'Cut' },
      });
      await waitForBlockedAppQuery(admin, databaseName(direct.url!));
      expect(proxy.cut()).toBeGreaterThan(0);
      expectUnavailable(t, await inFlight, 'network-cut-auth');
    } finally {
      await lock.release();
      await inFlight?.catch(() => undefined);
    }
    const again = await t.http.post('/api/auth/sign-up/email', { json: { email: 'cut-sign-up@example.test', password: 'a long enough password', name: 'Cut' } });
    expect(again.status, again.text).toBe(200);
  });
});

/**
 * Ends every backend of the app's pool (what a database restart or failover does to the app's connections), and
 * returns once they are gone. pg_terminate_backend only signals: until a backend has exited, a request may still
 * send its query down that connection and lose it (503 UNAVAILABLE with Retry-After, by design: a write cannot be
 * retried blindly). What the test holds the app to is what comes after the outage, not that window.
 */
async function terminateAppBackends(admin: postgres.Sql, database: string): Promise<number> {
  const rows = await admin<{ pid: number; ended: boolean }[]>`
    select pid, pg_terminate_backend(pid) as ended from pg_stat_activity
    where datname = ${database} and application_name = 'agent-marketplace'`;
  const pids = rows.map((r) => r.pid);
  for (let i = 0; i < 250; i++) {
    const [left] = await admin<{ n: number }[]>`select count(*)::int as n from pg_stat_activity where pid = any(${pids}::int[])`;
    if (left!.n === 0) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  return pids.length;
}

describe('the server ends the app\'s backends (pg_terminate_backend) under a request in flight', () => {
  let t: TestApp;
  let admin: postgres.Sql;
  beforeAll(async () => {
    t = await startTestApp();
    admin = postgres(t.databaseUrl!, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await admin?.end();
    await t?.close();
  });

  it('answers 503 UNAVAILABLE, and the next requests succeed on fresh connections (three rounds)', async () => {
    const database = databaseName(t.databaseUrl!);
    for (let round = 1; round <= 3; round++) {
      // Several requests at once first, so the pool holds several connections for the server to end.
      const warm = await Promise.all(Array.from({ length: 4 }, () => t.http.get('/agents')));
      expect(warm.map((r) => r.status)).toEqual([200, 200, 200, 200]);
      const requestId = `terminated-${round}`;
      const lock = await lockAgents(t.databaseUrl!);
      let inFlight: ReturnType<typeof t.http.get> | undefined;
      let ended = 0;
      try {
        inFlight = t.http.get('/agents', { headers: { 'x-request-id': requestId } });
        await waitForBlockedAppQuery(admin, database);
        ended = await terminateAppBackends(admin, database);
        expect(ended).toBeGreaterThan(0);
        expectUnavailable(t, await inFlight, requestId);
      } finally {
        await lock.release();
        await inFlight?.catch(() => undefined);
      }
      // Every connection of the pool died. What docs/operations.md promises: a request on a connection the server
      // ended answers 503 UNAVAILABLE (the driver may not have seen an idle connection close yet when the next
      // request takes it: seen in CI under load), and the pool recovers by itself. So: at most one 503 per ended
      // connection, each a clean, logged UNAVAILABLE, then only 200s (never a hang, a stale error that persists, or
      // a crash), including requests that take several connections at once.
      let unavailable = 0;
      for (let i = 0, inARow = 0; inARow < 3; i++) {
        expect(i, 'requests before three 200s in a row').toBeLessThan(3 * ended + 3);
        const id = `after-${round}-${i}`;
        const next = await t.http.get('/agents', { headers: { 'x-request-id': id } });
        if (next.status === 200) {
          inARow++;
        } else {
          expectUnavailable(t, next, id);
          unavailable++;
          inARow = 0;
        }
      }
      expect(unavailable).toBeLessThanOrEqual(ended);
      const burst = await Promise.all(Array.from({ length: 8 }, () => t.http.get('/agents')));
      expect(burst.map((r) => r.status)).toEqual(Array(8).fill(200));
      expect((await t.http.get('/ready')).status).toBe(200);
    }
  });
});

/**
 * The driver itself (postgres.js 3.4.9 as patched by patches/postgres+3.4.9.patch), with the calls Kysely's dialect
 * makes: a reserved connection, queries on it, release. Without the patch the first case ends the test process with
 * an uncaught TypeError (vitest reports it), the others hang until the test times out.
 */
describe('postgres.js when the server ends a reserved connection\'s backend', () => {
  let direct: TestDatabase;
  let admin: postgres.Sql;
  beforeAll(async () => {
    direct = await createTestDatabase();
    admin = postgres(direct.url!, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await admin?.end();
    await direct?.drop();
  });

  const outcome = (q: Promise<unknown>) => q.then(() => 'ok', (e: { code?: string }) => e.code);

  it('rejects every later query on the dead reservation with CONNECTION_CLOSED, and the pool serves the next ones', async () => {
    const sql = postgres(direct.url!, { max: 2, onnotice: () => {} });
    try {
      const reserved = await sql.reserve();
      const [row] = await reserved`select pg_backend_pid() as pid`;
      await admin`select pg_terminate_backend(${row!.pid})`;
      expect(await outcome(reserved`select 1`)).toMatch(/^(CONNECTION_CLOSED|ECONNRESET|57P01)$/);
      // porsager/postgres#1208: this one threw from nextWrite (process exit) or hung
      expect(await outcome(reserved`select 1`)).toBe('CONNECTION_CLOSED');
      reserved.release();
      for (let i = 0; i < 4; i++) expect(await outcome(sql`select 1`)).toBe('ok');
    } finally {
      await sql.end({ timeout: 1 });
    }
  });

  it('settles queries queued on the reservation and a late ROLLBACK, and the next reservation works', async () => {
    // max_pipeline (not in the type definitions): later queries wait in the reservation's own queue, not the connection's
    const sql = postgres(direct.url!, { max: 1, onnotice: () => {}, max_pipeline: 1 } as postgres.Options<{}>);
    try {
      const reserved = await sql.reserve();
      const [row] = await reserved`select pg_backend_pid() as pid`;
      const queued = [reserved`select pg_sleep(30)`, reserved`select 1`, reserved`select 2`].map(outcome);
      // terminate once the sleep runs (no fixed delay: wait for the backend's state)
      for (;;) {
        const [s] = await admin`select state from pg_stat_activity where pid = ${row!.pid}`;
        if (s?.state === 'active') break;
        await new Promise((resolve) => setImmediate(resolve));
      }
      await admin`select pg_terminate_backend(${row!.pid})`;
      expect(await Promise.all(queued)).toEqual(expect.arrayContaining([expect.stringMatching(/^(CONNECTION_CLOSED|ECONNRESET|57P01)$/)]));
      expect((await Promise.all(queued)).every((o) => o !== 'ok')).toBe(true);
      // Kysely sends ROLLBACK on the same connection after a failed statement in a transaction
      expect(await outcome(reserved`rollback`)).toBe('CONNECTION_CLOSED');
      reserved.release();
      const next = await sql.reserve();
      try {
        // a fresh backend, and no stale error of the dead one (57P01) on its first query
        const [fresh] = await next`select pg_backend_pid() as pid`;
        expect(fresh!.pid).not.toBe(row!.pid);
      } finally {
        next.release();
      }
    } finally {
      await sql.end({ timeout: 1 });
    }
  });

  it('hands the reconnected connections to the reservations that waited while the server ended the others', async () => {
    const sql = postgres(direct.url!, { max: 2, onnotice: () => {} });
    try {
      const held = [await sql.reserve(), await sql.reserve()];
      const pids = await Promise.all(held.map(async (r) => (await r`select pg_backend_pid() as pid`)[0]!.pid as number));
      // The pool is exhausted: these wait for a connection.
      const waiting = [sql.reserve(), sql.reserve(), sql.reserve()];
      await admin`select pg_terminate_backend(pid) from unnest(${pids}::int[]) as pid`;
      // Each gets one in turn (postgres.js handed a closed connection's reconnect to a waiter it then forgot: a hang).
      for (const next of waiting) {
        const r = await next;
        expect(await outcome(r`select 1`)).toBe('ok');
        r.release();
      }
      for (const r of held) r.release();
      expect(await outcome(sql`select 1`)).toBe('ok');
    } finally {
      await sql.end({ timeout: 1 });
    }
  });

  it('keeps its connection when a reservation fails while the server is unreachable, and serves once it is back', async () => {
    // A TCP front that refuses connections while closed and accepts them again on the same port.
    const target = new URL(direct.url!);
    let front: Server | undefined;
    const open = (port: number) =>
      new Promise<number>((resolve) => {
        front = createServer((client) => {
          const upstream = connect(Number(target.port), target.hostname);
          client.pipe(upstream).pipe(client);
          client.on('error', () => upstream.destroy());
          upstream.on('error', () => client.destroy());
        });
        front.listen(port, '127.0.0.1', () => resolve((front!.address() as AddressInfo).port));
      });
    const port = await open(0);
    await new Promise<void>((resolve) => front!.close(() => resolve()));
    const url = new URL(direct.url!);
    url.hostname = '127.0.0.1';
    url.port = String(port);
    const sql = postgres(url.toString(), { max: 1, onnotice: () => {}, connect_timeout: 5 });
    try {
      // Refused: the reservation fails (postgres.js left it queued and later gave the pool's only connection to it).
      await expect(sql.reserve()).rejects.toMatchObject({ code: 'ECONNREFUSED' });
      await open(port);
      expect(await outcome(sql`select 1`)).toBe('ok');
      const r = await sql.reserve();
      expect(await outcome(r`select 1`)).toBe('ok');
      r.release();
    } finally {
      await sql.end({ timeout: 1 });
      await new Promise<void>((resolve) => (front ? front.close(() => resolve()) : resolve()));
    }
  });

  it('gives the first query after a pooled connection was ended a fresh backend, not the dead one\'s 57P01', async () => {
    const sql = postgres(direct.url!, { max: 1, onnotice: () => {} });
    try {
      const [row] = await sql`select pg_backend_pid() as pid`;
      const inFlight = outcome(sql`select pg_sleep(30)`);
      for (;;) {
        const [s] = await admin`select state from pg_stat_activity where pid = ${row!.pid}`;
        if (s?.state === 'active') break;
        await new Promise((resolve) => setImmediate(resolve));
      }
      await admin`select pg_terminate_backend(${row!.pid})`;
      expect(await inFlight).not.toBe('ok');
      expect(await outcome(sql`select 1`)).toBe('ok');
    } finally {
      await sql.end({ timeout: 1 });
    }
  });
});
