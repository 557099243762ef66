import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startingHandler } from '../../functions/health/starting.ts';
import { memoryLogger } from '../../functions/platform/logger.ts';
import { openPostgres, rows, sql, type Db } from '../../functions/platform/db.ts';
import { openPGlite } from '../../functions/platform/pglite.ts';
import { freePort } from '../../scripts/postgres-server.ts';
import { createEmptyPostgresDatabase, testTier } from '../support/databases.ts';
import { HttpClient } from '../support/http.ts';

/**
 * `npm start` (`node scripts/serve.ts` with a V8 flag: Node's own type stripping, no TypeScript compiler at run time) as a user
 * runs it, on this tier's database: the embedded one in a fresh data directory (pglite tier) or an empty
 * PostgreSQL database through DATABASE_URL (postgres tier). It runs on Node 24 or later (the `node`
 * devDependency comes first on PATH in npm scripts, whatever Node the machine has), binds its port and answers
 * /health before the database is ready, says 503 on /ready until it is, then serves the API; a second start on
 * the same data finds nothing to migrate.
 */

const ENTRY = ['npm', 'start', '--silent'] as const;
const startScript = (JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> }).scripts.start;
const STARTUP_LIMIT = 300_000;

interface Running {
  child: ChildProcess;
  output: () => string;
  http: HttpClient;
  baseUrl: string;
}

async function start(env: Record<string, string>): Promise<Running> {
  const port = await freePort();
  const child = spawn(ENTRY[0], ENTRY.slice(1), {
    env: { ...process.env, NODE_ENV: 'development', AUTH_SECRET: '', ADMIN_EMAIL: '', ADMIN_PASSWORD: '', PORT: String(port), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const baseUrl = `http://127.0.0.1:${port}`;
  return { child, output: () => output, http: new HttpClient(baseUrl), baseUrl };
}

async function until<T>(what: string, running: Running, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + STARTUP_LIMIT;
  for (;;) {
    if (running.child.exitCode !== null) throw new Error(`npm start exited (${running.child.exitCode}) before ${what}:\n${running.output()}`);
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}:\n${running.output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * SIGTERM to the service itself (the pid its `listening` line names; npm runs it as a child), as a supervisor
 * would; npm then exits with the service's exit code.
 */
async function stop(running: Running): Promise<number | null> {
  if (running.child.exitCode !== null) return running.child.exitCode;
  const exited = new Promise<number | null>((r) => running.child.once('exit', (code) => r(code)));
  const listening = running
    .output()
    .split('\n')
    .find((l) => l.startsWith('{') && l.includes('"msg":"listening"'));
  const pid = listening ? (JSON.parse(listening) as { pid?: number }).pid : undefined;
  if (pid) process.kill(pid, 'SIGTERM');
  else running.child.kill('SIGTERM');
  return exited;
}

/** The service's database while it is stopped: the PostgreSQL one of DATABASE_URL, or the embedded one in DATA_DIR. */
async function withServiceDatabase<T>(env: Record<string, string>, use: (db: Db) => Promise<T>): Promise<T> {
  const database = env.DATABASE_URL ? openPostgres(env.DATABASE_URL, { max: 1 }) : await openPGlite(join(env.DATA_DIR!, 'pglite'));
  try {
    return await use(database.db);
  } finally {
    await database.close();
  }
}

/** One request written byte for byte on a fresh connection (fetch would refuse to send these). */
async function rawRequest(baseUrl: string, bytes: string): Promise<{ status: number; requestId: string; body: any }> {
  const { hostname, port } = new URL(baseUrl);
  const text = await new Promise<string>((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(bytes));
    let answer = '';
    socket.on('data', (d) => (answer += d));
    socket.on('end', () => resolve(answer));
    socket.on('error', reject);
  });
  const [head = '', body = ''] = text.split('\r\n\r\n');
  return {
    status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]),
    requestId: /^x-request-id: (\S+)$/im.exec(head)?.[1] ?? '',
    body: JSON.parse(body),
  };
}

describe('npm start', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'mkt-start-'));
  let env: Record<string, string>;
  let dropDatabase: (() => Promise<void>) | undefined;

  beforeAll(async () => {
    env = { DATA_DIR: dataDir, DATABASE_URL: '' };
    if (testTier() === 'postgres') {
      const empty = await createEmptyPostgresDatabase();
      env.DATABASE_URL = empty.url;
      dropDatabase = empty.drop;
    }
  });
  afterAll(async () => {
    await dropDatabase?.();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('first run: prints where it listens, answers /health, is not ready until migrated, then serves the API', async () => {
    const running = await start(env);
    try {
      await until('the listening line', running, async () => (running.output().includes(`listening on ${running.baseUrl}`) ? true : undefined));
      const health = await until('/health', running, async () => {
        const res = await running.http.get('/health');
        return res.status === 200 ? res : undefined;
      });
      expect(health.body).toMatchObject({ status: 'success', error: null, data: { status: 'ok', gitSha: 'dev', releaseVersion: 'dev' } });
      expect(health.headers.get('x-request-id')).toEqual(expect.any(String));

      // Until the database is migrated, readiness and every API path say "not yet", never a crash.
      const notReady: Array<{ status: number; code: unknown }> = [];
      await until('/ready', running, async () => {
        const res = await running.http.get('/ready');
        if (res.status === 200) return res;
        notReady.push({ status: res.status, code: res.body?.error?.code });
        return undefined;
      });
      // the first run migrates and seeds after it starts listening (seconds), so /ready was asked at least once before
      expect(notReady.length).toBeGreaterThan(0);
      for (const answer of notReady) expect(answer).toEqual({ status: 503, code: 'UNAVAILABLE' });

      const doc = await running.http.get('/openapi.json');
      expect(doc.status).toBe(200);
      expect(doc.body.openapi).toBe('3.1.0');
      expect((await running.http.get('/docs')).status).toBe(200);
      expect((await running.http.get('/no/such/route')).status).toBe(404);

      expect(running.output()).toMatch(/Ready after [\d.]+ s/);
      expect(running.output()).toMatch(/Demo admin created: \S+@\S+ \/ \S+/);
      // The generated AUTH_SECRET is kept in the data directory, readable by the owner only.
      expect(statSync(join(dataDir, 'auth-secret')).mode & 0o777).toBe(0o600);
      const lines = running
        .output()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l));
      const migrated = lines.find((l) => l.msg === 'database ready');
      expect(migrated.appliedMigrations).toBeGreaterThan(0);
      // The Node that runs the service: the one package.json's engines asks for, not the machine's older one.
      const node = lines.find((l) => l.msg === 'listening')?.node as string;
      console.log(`npm start ran on node ${node}`);
      expect(Number(/^v(\d+)\./.exec(node)?.[1])).toBeGreaterThanOrEqual(24);
      // Nothing compiles TypeScript at run time: plain `node` strips the types (no tsx or other loader), quietly.
      expect(startScript).toMatch(/^node (--[\w-]+=\w+ )*scripts\/serve\.ts$/);
      expect(running.output()).not.toContain('ExperimentalWarning');

      // Without SMTP, a mail is logged with its tokens redacted and also written whole to <DATA_DIR>/mail (owner
      // only), which the log line names: the newcomer's way to open a verification or reset link.
      const email = `newcomer-${Date.now()}@example.test`;
      const up = await running.http.post('/api/auth/sign-up/email', { json: { email, password: 'newcomer password 1', name: 'New' } });
      expect(up.status).toBe(200);
      const mailDir = join(dataDir, 'mail');
      const file = await until('the mail file', running, async () =>
        readdirSync(mailDir)
          .map((name) => join(mailDir, name))
          .find((path) => readFileSync(path, 'utf8').includes(`To: ${email}\n`)),
      );
      expect(statSync(mailDir).mode & 0o777).toBe(0o700);
      expect(statSync(file).mode & 0o777).toBe(0o600);
      expect(readFileSync(file, 'utf8')).toMatch(/\/api\/auth\/verify-email\?token=eyJ/);
      await until('the log line naming the file', running, async () => (running.output().includes(`"file":"${file}"`) ? true : undefined));
    } finally {
      expect(await stop(running)).toBe(0);
    }
  }, STARTUP_LIMIT + 30_000);

  it('second run on the same data: nothing to migrate, the same admin, ready again; it runs the housekeeping', async () => {
    // An expired password-reset row and a live one, left by the first run: the service deletes the expired one on its
    // own (no pg_cron here, no cron calling the drain), as the pg_cron job would. (Expired ten minutes ago: the
    // housekeeping runs 5 minutes behind the database's clock, migration 20261127007000.)
    await withServiceDatabase(env, (db) =>
      sql`insert into "verification" (id, identifier, value, "expiresAt")
          values ('housekeeping-expired', 'reset-password:housekeeping', 'x', now() - interval '10 minutes'),
                 ('housekeeping-live', 'reset-password:housekeeping', 'y', now() + interval '1 hour')`.execute(db),
    );
    const running = await start(env);
    try {
      await until('/ready', running, async () => ((await running.http.get('/ready')).status === 200 ? true : undefined));
      const lines = running
        .output()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l));
      expect(lines.find((l) => l.msg === 'database ready')?.appliedMigrations).toBe(0);
      expect(running.output()).toMatch(/Demo admin: \S+@\S+ {2}\(password in /);
      expect(running.output()).not.toContain('Demo admin created');

      // What Node's HTTP parser refuses before the app runs answers the envelope too, and logs one warning
      // without the request's bytes (here a bearer token in the oversized header).
      const huge = await rawRequest(running.baseUrl, `GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${'t'.repeat(20_000)}\r\n\r\n`);
      expect(huge.status).toBe(431);
      expect(huge.body).toMatchObject({ status: 'error', data: null, error: { code: 'HEADERS_TOO_LARGE', details: { requestId: huge.requestId } } });
      const garbage = await rawRequest(running.baseUrl, 'HELLO /health\r\n\r\n');
      expect(garbage.status).toBe(400);
      expect(garbage.body).toMatchObject({ status: 'error', error: { code: 'VALIDATION_ERROR', details: { issues: [{ path: 'request' }] } } });
      // and so does what the HTTP adapter cannot make a URL of (it answered an empty 400)
      const unreadable = await rawRequest(running.baseUrl, 'GET /health HTTP/1.1\r\nHost: exa mple\r\nConnection: close\r\n\r\n');
      expect([unreadable.status, unreadable.body]).toMatchObject([
        400,
        { status: 'error', data: null, error: { code: 'VALIDATION_ERROR', details: { issues: [{ path: 'request' }], requestId: unreadable.requestId } } },
      ]);
      expect(unreadable.requestId).not.toBe('');
      await until('the warnings', running, async () =>
        [garbage, huge, unreadable].every((r) => running.output().includes(`"requestId":"${r.requestId}"`)) ? true : undefined,
      );
      expect(running.output()).toContain('"msg":"request refused by the HTTP parser","status":431');
      expect(running.output()).not.toContain('tttttttt');
    } finally {
      expect(await stop(running)).toBe(0);
    }
    const left = await withServiceDatabase(env, (db) =>
      rows<{ id: string }>(db, sql`select id from "verification" where identifier = 'reset-password:housekeeping' order by id`),
    );
    expect(left.map((r) => r.id)).toEqual(['housekeeping-live']);
  }, STARTUP_LIMIT + 30_000);
});

describe('the Node everything runs on', () => {
  it('is Node 24 or later: this test worker, and a `node` a test starts from PATH', () => {
    const major = (version: string) => Number(/^v(\d+)\./.exec(version.trim())?.[1]);
    const spawned = spawnSync('node', ['--version'], { encoding: 'utf8' }).stdout;
    console.log(`test worker: node ${process.version}; \`node\` on PATH: ${spawned.trim()}`);
    expect(major(process.version)).toBeGreaterThanOrEqual(24);
    expect(major(spawned)).toBeGreaterThanOrEqual(24);
  });
});

describe('while starting', () => {
  const handler = startingHandler({ config: { gitSha: 'abc', releaseVersion: '1.0.0' }, logger: memoryLogger(), startedAt: new Date() });

  it('GET /health answers the health record', async () => {
    const res = handler(new Request('http://service/health', { headers: { 'x-request-id': 'boot-1' } }));
    expect(res.status).toBe(200);
    expect(res.headers.get('x-request-id')).toBe('boot-1');
    expect(await res.json()).toMatchObject({ status: 'success', error: null, data: { status: 'ok', gitSha: 'abc', releaseVersion: '1.0.0' } });
  });

  it.each([
    ['GET', '/ready'],
    ['POST', '/agents'],
    ['GET', '/api/auth/get-session'],
    ['POST', '/health'],
  ])('%s %s answers 503 UNAVAILABLE with Retry-After', async (method, path) => {
    const res = handler(new Request(`http://service${path}`, { method }));
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('1');
    expect(res.headers.get('x-request-id')).toEqual(expect.any(String));
    expect(await res.json()).toMatchObject({ status: 'error', data: null, error: { code: 'UNAVAILABLE' } });
  });
});
