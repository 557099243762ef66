import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, startPostgres, type PostgresServer } from '../../scripts/postgres-server.ts';
import { CONNECTION_BOUNDS, first, inTurn, isConnectionLost, openPostgres, rows, sql, type Database } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';

/**
 * A database connection that goes silent (no FIN, no RST), and the bounds every pooled connection now has (review 31;
 * functions/platform/db.ts, docs/operations.md "A database outage").
 *
 * A failover where the old primary's address simply stops answering (a managed database moving to another host, a NAT
 * or balancer dropping its state) leaves the pool's connections open and silent. The service set no statement_timeout,
 * no deadline in the driver and no TCP user timeout, so a query sent on such a connection waited until the kernel gave
 * up retransmitting (about 15 minutes), or for ever behind a middlebox that still acknowledges; the pool was soon made
 * of those connections and every request of the instance queued behind them.
 *
 * A TCP proxy sits between the app and PostgreSQL and freezes the connections open at that moment (nothing forwarded
 * either way, sockets left open, as a vanished peer behind a middlebox looks); connections opened after the freeze go
 * through, as they would to the new primary. The pool's reply deadline is statement_timeout plus 5 s, so the URL sets
 * statement_timeout=2000 (the override an operator has too) to keep the test short. Expected: a request is answered
 * (503 UNAVAILABLE, or 200 on a fresh connection) within a generous 20 s, and the instance serves again at once.
 * Before: no answer at all. The same over TLS, which the pool now negotiates itself so that the socket it watches is
 * the one postgres.js uses.
 */

async function startFreezableProxy(target: { host: string; port: number }) {
  const pairs = new Set<[Socket, Socket]>();
  const frozen = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    client.pipe(upstream);
    upstream.pipe(client);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    /** Stops forwarding on every open connection (both ways) and leaves the sockets open. */
    freeze(): number {
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
        frozen.add(client).add(upstream);
      }
      const n = pairs.size;
      pairs.clear();
      return n;
    },
    close: async () => {
      for (const s of frozen) s.destroy();
      for (const [a, b] of pairs) (a.destroy(), b.destroy());
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** `url` through the proxy, with the query parameters given. */
function via(url: string, port: number, query: Record<string, string>): string {
  const u = new URL(url);
  u.hostname = '127.0.0.1';
  u.port = String(port);
  for (const [k, v] of Object.entries(query)) u.searchParams.set(k, v);
  return u.toString();
}

const sleep = (ms: number) => new Promise<'no answer'>((r) => setTimeout(() => r('no answer'), ms));

describe('the connections to the database go silent (failover to another host, no reset)', () => {
  let direct: TestDatabase;
  let proxy: Awaited<ReturnType<typeof startFreezableProxy>>;
  let t: TestApp;

  beforeAll(async () => {
    direct = await createTestDatabase();
    const url = new URL(direct.url!);
    proxy = await startFreezableProxy({ host: url.hostname, port: Number(url.port) });
    const proxied = via(direct.url!, proxy.port, { statement_timeout: '2000' });
    const database = openPostgres(proxied, { max: 10 });
    t = await startTestApp({ testDatabase: { database, url: proxied, drop: () => database.close({ graceSeconds: 0 }) } });
  }, 60_000);

  afterAll(async () => {
    await proxy?.close();
    await t?.close();
    await t?.database.close({ graceSeconds: 0 });
    await direct?.drop();
  });

  it('requests are still answered, 503 or 200, and the next ones are served on fresh connections', async () => {
    // Fill the pool the way a busy instance has it: ten connections open.
    const warm = await Promise.all(Array.from({ length: 10 }, () => t.http.get('/agents')));
    expect(warm.map((r) => r.status)).toEqual(Array(10).fill(200));
    expect(proxy.freeze()).toBeGreaterThan(0);

    // As many requests as the pool has connections: each takes one of the frozen ones.
    const wave = () => {
      const requests = Array.from({ length: 10 }, () => t.http.get('/agents'));
      for (const r of requests) r.catch(() => {});
      return Promise.race([Promise.all(requests), sleep(20_000)]);
    };
    const answers = await wave();
    expect(answers === 'no answer' ? 'no answer within 20 s' : answers.map((a) => a.status)).toSatisfy(
      (s: unknown) => Array.isArray(s) && s.every((x) => x === 200 || x === 503),
    );
    // A dead connection fails the one request that finds it, once: then the pool serves on fresh ones.
    let statuses: unknown = [];
    for (let i = 0; i < 3; i++) {
      const again = await wave();
      statuses = again === 'no answer' ? 'no answer within 20 s' : again.map((a) => a.status);
      if (Array.isArray(statuses) && statuses.every((x) => x === 200)) break;
    }
    expect(statuses).toEqual(Array(10).fill(200));
    expect(t.logs.some((l) => l.msg === 'unhandled error')).toBe(false);
  }, 120_000);
});

describe('the bounds of a pooled connection', () => {
  let test: TestDatabase;
  const opened: Database[] = [];
  const open = (query: Record<string, string> = {}) => {
    const u = new URL(test.url!);
    for (const [k, v] of Object.entries(query)) u.searchParams.set(k, v);
    const database = openPostgres(u.toString(), { max: 2 });
    opened.push(database);
    return database;
  };

  beforeAll(async () => {
    test = await createTestDatabase();
  }, 60_000);
  afterAll(async () => {
    for (const d of opened) await d.close({ graceSeconds: 0 });
    await test?.drop();
  });

  it('a database that refuses connections: every query fails as unreachable (none hangs), and the pool connects once it is there', async () => {
    // The pool opens its own sockets: one that cannot be opened must fail its query and leave no pool slot behind.
    const port = await freePort();
    const database = openPostgres(via(test.url!, port, {}), { max: 2 });
    opened.push(database);
    for (let i = 0; i < 5; i++) {
      const err = await sql`select 1`.execute(database.db).then(() => undefined, (e: unknown) => e);
      expect(isConnectionLost(err), String(err)).toBe(true);
    }
    const target = new URL(test.url!);
    const proxy = createServer((client) => {
      const upstream = connect(Number(target.port), target.hostname);
      client.pipe(upstream).pipe(client);
      client.on('error', () => upstream.destroy());
      upstream.on('error', () => client.destroy());
    });
    await new Promise<void>((resolve) => proxy.listen(port, '127.0.0.1', resolve));
    try {
      expect(await Promise.all([1, 2, 3].map(() => first(database.db, sql`select 1 as one`)))).toEqual([{ one: 1 }, { one: 1 }, { one: 1 }]);
    } finally {
      await database.close({ graceSeconds: 0 });
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });

  it('statement_timeout and idle_in_transaction_session_timeout are set, and DATABASE_URL can change them', async () => {
    const settings = (db: Database) =>
      first<{ statement: string; idle: string }>(
        db.db,
        sql`select current_setting('statement_timeout') as statement, current_setting('idle_in_transaction_session_timeout') as idle`,
      );
    expect(CONNECTION_BOUNDS).toEqual({ statement_timeout: 30_000, idle_in_transaction_session_timeout: 60_000 });
    expect(await settings(open())).toEqual({ statement: '30s', idle: '1min' });
    expect(await settings(open({ statement_timeout: '2min', idle_in_transaction_session_timeout: '0' }))).toEqual({ statement: '2min', idle: '0' });
  });

  it('a statement past statement_timeout is ended and counts as the database not answering (503)', async () => {
    const db = open({ statement_timeout: '300' }).db;
    const err = await sql`select pg_sleep(2)`.execute(db).then(() => undefined, (e: unknown) => e);
    expect((err as { code?: string }).code).toBe('57014');
    expect(isConnectionLost(err)).toBe(true);
    // The connection itself is fine.
    expect(await first(db, sql`select 1 as one`)).toEqual({ one: 1 });
  });

  it('migrations (runScript) and start-up turns (inTurn) are not bound by statement_timeout', async () => {
    const database = open({ statement_timeout: '300' });
    await database.runScript('select pg_sleep(1)');
    // Another instance holds the turn longer than a statement may run here: this one waits for it, then runs.
    const other = postgres(test.url!, { max: 1, onnotice: () => {} });
    try {
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      let holding!: () => void;
      const held = new Promise<void>((r) => (holding = r));
      const holder = other.begin(async (tx) => {
        await tx`select pg_advisory_xact_lock(hashtextextended('silent-connection-test', 0))`;
        holding();
        await released;
      });
      await held;
      const order: string[] = [];
      const turn = inTurn(database, 'silent-connection-test', async () => void order.push('turn'));
      await new Promise((r) => setTimeout(r, 1_000));
      order.push('released');
      release();
      await holder;
      await turn;
      expect(order).toEqual(['released', 'turn']);
    } finally {
      await other.end({ timeout: 1 });
    }
  });
});

describe('over TLS', () => {
  let server: PostgresServer;
  let certDir: string;
  let proxy: Awaited<ReturnType<typeof startFreezableProxy>>;
  const opened: Database[] = [];

  beforeAll(async () => {
    // A self-signed certificate the server can read (it runs as `postgres` when the tests run as root).
    certDir = mkdtempSync(join(tmpdir(), 'mkt-tls-'));
    chmodSync(certDir, 0o755);
    const cert = join(certDir, 'server.crt');
    const key = join(certDir, 'server.key');
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-days', '1', '-keyout', key, '-out', cert], {
      stdio: 'ignore',
    });
    chmodSync(key, 0o600);
    if (process.getuid?.() === 0) {
      const [uid, gid] = ['-u', '-g'].map((flag) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim()));
      chownSync(key, uid!, gid!);
      chownSync(cert, uid!, gid!);
    }
    server = await startPostgres({ settings: { ssl: 'on', ssl_cert_file: cert, ssl_key_file: key } });
    proxy = await startFreezableProxy({ host: '127.0.0.1', port: server.port });
  }, 60_000);

  afterAll(async () => {
    for (const d of opened) await d.close({ graceSeconds: 0 });
    await proxy?.close();
    server?.stop();
    if (certDir) rmSync(certDir, { recursive: true, force: true });
  });

  it('sslmode=require connects over TLS; sslmode=prefer too; no sslmode stays plain', async () => {
    const ssl = async (query: Record<string, string>) => {
      const u = new URL(server.url);
      for (const [k, v] of Object.entries(query)) u.searchParams.set(k, v);
      const database = openPostgres(u.toString(), { max: 1 });
      opened.push(database);
      const row = await first<{ ssl: boolean }>(database.db, sql`select ssl from pg_stat_ssl where pid = pg_backend_pid()`);
      return row?.ssl;
    };
    expect(await ssl({ sslmode: 'require' })).toBe(true);
    expect(await ssl({ sslmode: 'prefer' })).toBe(true);
    expect(await ssl({})).toBe(false);
    // verify-full checks the certificate: a self-signed one is refused, as postgres.js itself would.
    const strict = openPostgres(`${server.url}?sslmode=verify-full`, { max: 1 });
    opened.push(strict);
    await expect(sql`select 1`.execute(strict.db)).rejects.toThrow();
  });

  it('a silent TLS connection is given up too, and the pool reconnects', async () => {
    const database = openPostgres(via(server.url, proxy.port, { sslmode: 'require', statement_timeout: '2000' }), { max: 2 });
    opened.push(database);
    expect(await rows(database.db, sql`select ssl from pg_stat_ssl where pid = pg_backend_pid()`)).toEqual([{ ssl: true }]);
    expect(proxy.freeze()).toBeGreaterThan(0);
    const outcome = await Promise.race([
      sql`select 1 as one`.execute(database.db).then(
        () => 'answered',
        (err: unknown) => (isConnectionLost(err) ? 'connection lost' : `failed: ${(err as Error).message}`),
      ),
      sleep(20_000),
    ]);
    expect(['answered', 'connection lost']).toContain(outcome);
    expect(await rows(database.db, sql`select ssl from pg_stat_ssl where pid = pg_backend_pid()`)).toEqual([{ ssl: true }]);
  }, 40_000);
});
