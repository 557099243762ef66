import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPostgres, type PostgresServer } from '../../scripts/postgres-server.ts';
import { CONNECTION_BOUNDS, first, inTurn, isConnectionLost, openPostgres, sql, type Database } from '../../functions/platform/db.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';

/**
 * The bounds every pooled connection has (review 31; functions/platform/db.ts CONNECTION_BOUNDS, docs/operations.md
 * "A database outage"): statement_timeout and idle_in_transaction_session_timeout as startup parameters, which
 * DATABASE_URL may change; a statement past its bound is the database not answering (503); migrations and start-up
 * turns are not bound by them. (A connection that goes silent with no reset is left to the deployment's TCP settings:
 * operations.md.)
 */

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

  it('a server with no connection slot left (53300) counts as the database not answering (503), which the SDK retries', async () => {
    // Review 36: many instances each opening their pool, or a deploy briefly doubling them, reach max_connections;
    // PostgreSQL then refuses a new connection with 53300 and every usage call answered 500 INTERNAL (never retried by
    // the SDK). A role allowed no connection gets the same refusal from the real server, without filling it.
    const role = `no_slot_${Math.random().toString(36).slice(2, 10)}`;
    const admin = postgres(test.url!, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create role ${role} login password 'x' connection limit 0`);
    try {
      const u = new URL(test.url!);
      u.username = role;
      u.password = 'x';
      const full = openPostgres(u.toString(), { max: 1 });
      opened.push(full);
      const err = await sql`select 1`.execute(full.db).then(() => undefined, (e: unknown) => e);
      expect((err as { code?: string }).code).toBe('53300');
      expect(isConnectionLost(err)).toBe(true);
    } finally {
      await admin.unsafe(`drop role ${role}`);
      await admin.end({ timeout: 1 });
    }
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
  }, 60_000);

  afterAll(async () => {
    for (const d of opened) await d.close({ graceSeconds: 0 });
    server?.stop();
    if (certDir) rmSync(certDir, { recursive: true, force: true });
  });

  it('the bounds hold over TLS too: sslmode=require and prefer connect over TLS, no sslmode stays plain', async () => {
    const ssl = async (query: Record<string, string>) => {
      const u = new URL(server.url);
      for (const [k, v] of Object.entries(query)) u.searchParams.set(k, v);
      const database = openPostgres(u.toString(), { max: 1 });
      opened.push(database);
      const row = await first<{ ssl: boolean; statement: string }>(
        database.db,
        sql`select ssl, current_setting('statement_timeout') as statement from pg_stat_ssl where pid = pg_backend_pid()`,
      );
      expect(row?.statement).toBe('30s');
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
});
