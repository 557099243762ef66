import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { freePort, startPostgres } from '../postgres-server.ts';

/**
 * `npx tsx scripts/bench/startup.ts`: what a user of `npm start` waits
 * for and what the service holds in memory, as `npm start` runs it (`node scripts/serve.ts`, development mode,
 * the demo admin and catalog created on a first run):
 *
 * - embedded database, first run (no data directory yet: creates and migrates PGlite): `npm start` to /ready
 * - embedded database, second run on the same data: `npm start` to /ready
 * - idle RSS of the service on PGlite and on a real PostgreSQL (a throwaway cluster started the way
 *   scripts/postgres-server.ts starts one for the tests), read from /proc every second while it sits idle after
 *   /ready, for IDLE_SECONDS (default 15): the last sample, with the highest one beside it.
 *
 * Time is wall clock from spawning `npm start` until GET /ready answers 200 (polled every 20 ms), so it includes
 * npm's own start-up; the service's own "Ready after" figure is printed beside it. Linux only (/proc).
 * Figures depend on the machine and what else runs on it: the 1-minute load average is printed with them.
 */

const IDLE_SECONDS = Number(process.env.IDLE_SECONDS ?? 15);
const GOALS = { firstRun: 5, secondRun: 2, rssPglite: 350, rssPostgres: 150 };

interface Started {
  child: ChildProcess;
  url: string;
  output: () => string;
  seconds: number;
}

async function npmStart(env: Record<string, string>): Promise<Started> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const began = performance.now();
  const child = spawn('npm', ['start', '--silent'], {
    env: { ...process.env, NODE_ENV: 'development', AUTH_SECRET: '', ADMIN_EMAIL: '', ADMIN_PASSWORD: '', PORT: String(port), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  for (;;) {
    if (child.exitCode !== null) throw new Error(`npm start exited with ${child.exitCode}:\n${output}`);
    if (await fetch(`${url}/ready`).then((r) => r.ok, () => false)) break;
    if (performance.now() - began > 300_000) throw new Error(`not ready after 300 s:\n${output}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return { child, url, output: () => output, seconds: (performance.now() - began) / 1000 };
}

/**
 * Stops the service itself, then npm: npm does not always pass SIGTERM on through its shell, and a service left
 * running would hold its port, its memory and this process's pipes (the benchmark would never exit).
 */
async function stop(started: Started): Promise<void> {
  if (started.child.exitCode !== null) return;
  const exited = new Promise((r) => started.child.once('exit', r));
  const service = servicePid(started.child.pid!);
  process.kill(service, 'SIGTERM');
  while (existsSync(`/proc/${service}`) && !/^State:\s+Z/m.test(readFileSync(`/proc/${service}/status`, 'utf8'))) {
    await new Promise((r) => setTimeout(r, 20));
  }
  started.child.kill('SIGTERM');
  await exited;
}

/** The process that runs scripts/serve.ts under `npm start` (npm -> sh -> node), by walking /proc children. */
function servicePid(rootPid: number): number {
  const queue = [rootPid];
  while (queue.length) {
    const pid = queue.shift()!;
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    if (cmdline.includes('scripts/serve.ts')) return pid;
    for (const task of readTasks(pid)) {
      const children = readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').trim();
      if (children) queue.push(...children.split(/\s+/).map(Number));
    }
  }
  throw new Error('the service process was not found under npm start');
}

/** The threads of a process (a child is listed under the thread that forked it). */
function readTasks(pid: number): string[] {
  const dir = `/proc/${pid}/task`;
  return existsSync(dir) ? readdirSync(dir) : [];
}

function rssMb(pid: number): number {
  const kb = Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
  return kb / 1024;
}

/** RSS sampled every second while the service sits idle after /ready; the last sample (start-up work settled). */
async function idleRss(started: Started): Promise<{ idle: number; peak: number }> {
  const pid = servicePid(started.child.pid!);
  let peak = 0;
  let last = 0;
  for (let i = 0; i < IDLE_SECONDS; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    last = rssMb(pid);
    peak = Math.max(peak, last);
  }
  return { idle: last, peak };
}

function serviceSeconds(started: Started): string {
  return /Ready after ([\d.]+) s/.exec(started.output())?.[1] ?? '?';
}

function nodeVersion(started: Started): string {
  const line = started
    .output()
    .split('\n')
    .find((l) => l.includes('"msg":"listening"'));
  return line ? (JSON.parse(line) as { node: string }).node : '?';
}

async function main() {
  if (!existsSync('/proc/self/status')) throw new Error('this benchmark reads /proc: Linux only');
  const rows: Array<[string, string, string]> = [];
  const mark = (ok: boolean) => (ok ? 'ok' : 'over the goal');

  const dataDir = mkdtempSync(join(tmpdir(), 'mkt-bench-start-'));
  let node = '?';
  try {
    const first = await npmStart({ DATA_DIR: dataDir, DATABASE_URL: '' });
    node = nodeVersion(first);
    await stop(first);
    rows.push([`npm start to /ready, embedded, first run`, `${first.seconds.toFixed(2)} s (service: ${serviceSeconds(first)} s)`, `<= ${GOALS.firstRun} s: ${mark(first.seconds <= GOALS.firstRun)}`]);

    const second = await npmStart({ DATA_DIR: dataDir, DATABASE_URL: '' });
    rows.push([`npm start to /ready, embedded, second run`, `${second.seconds.toFixed(2)} s (service: ${serviceSeconds(second)} s)`, `<= ${GOALS.secondRun} s: ${mark(second.seconds <= GOALS.secondRun)}`]);
    const rss = await idleRss(second);
    await stop(second);
    rows.push([`idle RSS, embedded (PGlite)`, `${rss.idle.toFixed(0)} MB (highest while idle: ${rss.peak.toFixed(0)})`, `<= ${GOALS.rssPglite} MB: ${mark(rss.idle <= GOALS.rssPglite)}`]);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }

  const server = await startPostgres();
  const pgDataDir = mkdtempSync(join(tmpdir(), 'mkt-bench-start-'));
  try {
    const admin = postgres(server.url, { max: 1, onnotice: () => {} });
    await admin.unsafe('create database bench_startup');
    await admin.end();
    const url = server.url.replace(/\/postgres$/, '/bench_startup');
    const first = await npmStart({ DATA_DIR: pgDataDir, DATABASE_URL: url });
    await stop(first);
    const again = await npmStart({ DATA_DIR: pgDataDir, DATABASE_URL: url });
    rows.push([`npm start to /ready, PostgreSQL, first run / second run`, `${first.seconds.toFixed(2)} s / ${again.seconds.toFixed(2)} s`, '']);
    const rss = await idleRss(again);
    await stop(again);
    rows.push([`idle RSS, PostgreSQL (postgres.js)`, `${rss.idle.toFixed(0)} MB (highest while idle: ${rss.peak.toFixed(0)})`, `<= ${GOALS.rssPostgres} MB: ${mark(rss.idle <= GOALS.rssPostgres)}`]);
  } finally {
    server.stop();
    rmSync(pgDataDir, { recursive: true, force: true });
  }

  console.log(`\nnpm start on node ${node}; load average (1 min) at the end: ${loadavg()[0]!.toFixed(2)}; RSS sampled for ${IDLE_SECONDS} s of idling\n`);
  const width = Math.max(...rows.map((r) => r[0].length));
  const width2 = Math.max(...rows.map((r) => r[1].length));
  for (const [what, value, goal] of rows) console.log(`  ${what.padEnd(width)}  ${value.padEnd(width2)}  ${goal}`);
  console.log();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
