import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { openPGlite } from '../../functions/platform/pglite.ts';
import { freePort } from '../../scripts/postgres-server.ts';
import { root } from '../../scripts/supabase-cli.ts';

/**
 * One process at a time opens the embedded database (functions/platform/embedded-database-lock.ts, review 32):
 * `npm run admin-client` while `npm start` ran on the same DATA_DIR opened the PGlite directory a second time, two
 * PostgreSQL instances writing one set of files, and the running server did not see the new client. Now whatever
 * opens it takes `<DATA_DIR>/pglite.lock` (O_EXCL, its pid) until it closes it; every other opener is refused with
 * exit code 3 and a message saying what to do, having written nothing; a lock whose process is gone is taken over.
 * Real commands in child processes, as a user runs them; no database server needed (hence once).
 */

const dataDir = mkdtempSync(join(tmpdir(), 'mkt-lock-'));
const lockFile = join(dataDir, 'pglite.lock');
const env = { ...process.env, NODE_ENV: 'development', DATA_DIR: dataDir, DATABASE_URL: '', AUTH_SECRET: '', ADMIN_EMAIL: '', ADMIN_PASSWORD: '', LOG_LEVEL: 'warn' };
const started: Server[] = [];
// The data directory starts migrated (the suite's snapshot): the lock is the subject here, and a first run's migration
// of PGlite from nothing (tests/foundation/npm-start.test.ts) would add about 6 s of this 2-core machine's time.
beforeAll(async () => {
  const database = await openPGlite(join(dataDir, 'pglite'), { loadDataDir: new Blob([readFileSync(inject('pgliteSnapshot'))]) });
  await database.close();
});
afterAll(() => {
  // A failed test may leave one running: the service itself too, not only npm, which does not pass a SIGKILL on.
  for (const server of started) {
    if (server.child.exitCode !== null) continue;
    const pid = servicePid(server);
    if (pid) process.kill(pid, 'SIGKILL');
    server.child.kill('SIGKILL');
  }
  rmSync(dataDir, { recursive: true, force: true });
});

/** A command run to its end, as `npm run <script>` (npm puts the project's Node 24 first on PATH). */
function npmRun(script: string, ...args: string[]) {
  return runToEnd('npm', ['run', '--silent', script, ...(args.length ? ['--', ...args] : [])]);
}

/** A child process run to its end without blocking this worker, so several run at once (each loads the service). */
function runToEnd(command: string, args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d) => (stdout += d));
    child.stderr!.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.once('error', reject);
    child.once('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

const adminClient = (name: string) => npmRun('admin-client', '--redirect-uri', 'http://127.0.0.1:8787/callback', '--name', name);

/** The first-party clients of that name, read while nothing else has the database open. */
async function clientsNamed(name: string): Promise<number> {
  const database = await openPGlite(join(dataDir, 'pglite'));
  try {
    const row = await first<{ n: number }>(
      database.db,
      sql`select count(*)::int as n from "oauthClient" c join public.first_party_clients f on f.client_id = c."clientId" where c.name = ${name}`,
    );
    return row!.n;
  } finally {
    await database.close();
  }
}

interface Server {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function npmStart(port: number): Server {
  const child = spawn('npm', ['start', '--silent'], { cwd: root, env: { ...env, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const server = { child, output: () => output, exited };
  started.push(server);
  return server;
}

async function ready(server: Server, port: number): Promise<void> {
  const deadline = Date.now() + 240_000;
  for (;;) {
    if (server.child.exitCode !== null) throw new Error(`npm start exited (${server.child.exitCode}):\n${server.output()}`);
    const ok = await fetch(`http://127.0.0.1:${port}/ready`).then((r) => r.ok, () => false);
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`npm start was not ready in time:\n${server.output()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** The service's own pid, from its `listening` line (npm runs it as a child); undefined before that line. */
function servicePid(server: Server): number | undefined {
  const line = server.output().split('\n').find((l) => l.includes('"msg":"listening"'));
  return line ? (JSON.parse(line) as { pid: number }).pid : undefined;
}

const REFUSAL = /in use by process \d+ \(the server is running on this data directory, or another command is\): stop it first, or run this against DATABASE_URL/;

describe('the embedded database, one process at a time', () => {
  it('while npm start runs, admin-client, migrate, seed and a second npm start are refused (exit 3) and write nothing', async () => {
    const port = await freePort();
    const server = npmStart(port);
    await ready(server, port);
    const pid = servicePid(server)!;
    expect(readFileSync(lockFile, 'utf8')).toBe(String(pid));

    // all four at once (each is refused on its own; run one after another they took half a minute)
    const second = npmStart(await freePort());
    const [beside, migrate, seed, secondExit] = await Promise.all([
      adminClient('Lock test: beside the server'),
      npmRun('migrate'),
      runToEnd(process.execPath, ['scripts/seed.ts']),
      second.exited,
    ]);
    expect({ status: beside.status, stderr: beside.stderr }).toEqual({ status: 3, stderr: expect.stringMatching(REFUSAL) });
    expect(beside.stderr).toContain(`process ${pid}`);
    expect(beside.stdout).not.toContain('clientSecret');
    expect({ status: migrate.status, stderr: migrate.stderr }).toEqual({ status: 3, stderr: expect.stringMatching(REFUSAL) });
    expect({ status: seed.status, stderr: seed.stderr }).toEqual({ status: 3, stderr: expect.stringMatching(REFUSAL) });
    expect(secondExit).toBe(3);
    expect(second.output()).toMatch(REFUSAL);

    // The server holding it goes on, and keeps its lock.
    expect((await fetch(`http://127.0.0.1:${port}/ready`)).status).toBe(200);
    expect(readFileSync(lockFile, 'utf8')).toBe(String(pid));
    process.kill(pid, 'SIGTERM');
    expect(await server.exited).toBe(0);

    // Stopped, it let the lock go; the refused command had written nothing, and run now it writes its client.
    expect(existsSync(lockFile)).toBe(false);
    expect(await clientsNamed('Lock test: beside the server')).toBe(0);
    const after = await adminClient('Lock test: after the server');
    expect(after.status, after.stderr).toBe(0);
    expect(JSON.parse(after.stdout.slice(0, after.stdout.lastIndexOf('}') + 1))).toMatchObject({ clientId: expect.any(String) });
    expect(existsSync(lockFile)).toBe(false);
    expect(await clientsNamed('Lock test: after the server')).toBe(1);
  }, 400_000);

  it('a lock left by a process that no longer runs (killed, crashed) is taken over', async () => {
    const gone = spawnSync(process.execPath, ['-e', 'console.log(process.pid)'], { encoding: 'utf8' });
    const deadPid = Number(gone.stdout.trim());
    expect(deadPid).toBeGreaterThan(0);
    writeFileSync(lockFile, String(deadPid));
    const client = await adminClient('Lock test: stale lock');
    expect(client.status, client.stderr).toBe(0);
    expect(existsSync(lockFile)).toBe(false);
    expect(await clientsNamed('Lock test: stale lock')).toBe(1);

    // A lock file with no pid in it (its process killed while taking it) is stale too.
    writeFileSync(lockFile, '');
    expect((await npmRun('migrate')).status).toBe(0);
    expect(existsSync(lockFile)).toBe(false);
  }, 120_000);
});
