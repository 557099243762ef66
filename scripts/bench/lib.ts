import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import postgres from 'postgres';
// @ts-expect-error autocannon ships no types
import autocannonUntyped from 'autocannon';
import { createApp } from '../../functions/app.ts';
import { buildDeps } from '../../functions/deps.ts';
import { loadConfig } from '../../functions/platform/config.ts';
import type { openPostgres } from '../../functions/platform/db.ts';
import { createLogger } from '../../functions/platform/logger.ts';
import { envelopeHttpServer } from '../../functions/platform/node-runtime.ts';
import { freePort } from '../postgres-server.ts';
import type { HttpClient } from '../../tests/support/http.ts';
import type { OpenLoopPlan, OpenLoopResult } from './open-loop.ts';
import { sessionCookie } from '../../tests/support/users.ts';

/** Plumbing shared by the benchmarks in scripts/bench/: the service under test, load runs, percentiles, CPU. */

export const BENCH_AUTH_SECRET = 'bench-secret-bench-secret-bench-secret!';

// ---------------------------------------------------------------- the Node entry as a child process

export interface Service {
  url: string;
  child: ChildProcess;
}

/**
 * Starts the real Node entry (scripts/serve.ts) as a child process, so the load generator does not share its
 * event loop, in production mode on a free port, and waits until GET /ready answers. `env` is added last
 * (it may override the defaults); as a function it receives the service's URL (e.g. for PUBLIC_BASE_URL).
 */
export async function startService(
  env: Record<string, string> | ((url: string) => Record<string, string>),
  readyTimeoutMs = 60_000,
): Promise<Service> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  // BENCH_CPU_PROF=<dir>: the service writes a V8 CPU profile there when it stops (open it in Chrome DevTools).
  const profileDir = process.env.BENCH_CPU_PROF;
  // As `npm start` runs it (plain node: Node 24 strips the types; the same flags), on the Node running this script.
  // BENCH_NODE=/usr/bin/node runs the service on another Node instead (the load generator stays on this one), e.g.
  // Node 20 for the runtime comparison of issue 12: Node 20 cannot strip types, so tsx's loader compiles them.
  const startArgs = (JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: { start: string } }).scripts.start.split(' ').slice(1);
  const node = process.env.BENCH_NODE || process.execPath;
  const loader = process.env.BENCH_NODE ? ['--import', 'tsx'] : [];
  // BENCH_TRACE=<dir>: the service traces its garbage collections (--trace-gc) into <dir>/service.log, with its
  // request log, whose times place each pause (how the open loop's tail was found: open-loop.ts).
  const traceDir = process.env.BENCH_TRACE;
  if (traceDir) mkdirSync(traceDir, { recursive: true });
  const args = [...(traceDir ? ['--trace-gc'] : []), ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []), ...loader, ...startArgs];
  const child = spawn(node, args, {
    env: {
      ...process.env,
      NODE_ENV: 'production',
      AUTH_SECRET: BENCH_AUTH_SECRET,
      PORT: String(port),
      ...(typeof env === 'function' ? env(url) : env),
    },
    stdio: ['ignore', traceDir ? openSync(join(traceDir, 'service.log'), 'w') : 'ignore', 'inherit'],
  });
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`service exited with ${child.exitCode}`);
    if (await fetch(`${url}/ready`).then((r) => r.ok, () => false)) return { url, child };
    if (Date.now() > deadline) throw new Error('service did not become ready');
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** SIGTERM, then wait for the child to exit (a no-op if it already has). */
export async function stopService(service: Service): Promise<void> {
  const { child } = service;
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}

/** Creates database `name` on the server at `serverUrl` (its `postgres` database) and returns its URL. */
export async function createDatabase(serverUrl: string, name: string): Promise<string> {
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`create database ${name}`);
  } finally {
    await admin.end();
  }
  return serverUrl.replace(/\/postgres$/, `/${name}`);
}

// ---------------------------------------------------------------- the app in this process

/**
 * The app served in this process (for the benchmarks that seed a database directly and measure the app, not the
 * process boundary). `env` is added to the config after PORT and PUBLIC_BASE_URL.
 */
export async function serveAppInProcess(
  database: ReturnType<typeof openPostgres>,
  env: Record<string, string>,
  logLevel: 'warn' | 'error',
): Promise<{ baseUrl: string; close: () => Promise<void> }> {
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  const config = loadConfig({ PORT: String(port), PUBLIC_BASE_URL: baseUrl, ...env });
  const logger = createLogger({ level: logLevel });
  const deps = await buildDeps({ config, database, logger });
  const app = createApp(deps);
  // the server npm start runs
  const server = envelopeHttpServer(app.fetch, logger, '127.0.0.1');
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', () => resolve()));
  return { baseUrl, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

// ---------------------------------------------------------------- accounts and agents over HTTP

/** The `cookie` request header carrying every cookie a response set. */
export function cookieHeader(res: Response): string {
  return res.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
}

/** Signs in the admin the service bootstrapped (ADMIN_EMAIL / ADMIN_PASSWORD) and returns its session cookie. */
export async function signInAdmin(http: HttpClient, baseUrl: string, admin: { email: string; password: string }): Promise<string> {
  // The same headers a browser front end sends (trusted origin), so production's checks apply as they would.
  const signedIn = await http.post('/api/auth/sign-in/email', { json: admin, headers: { origin: baseUrl } });
  if (signedIn.status !== 200) throw new Error(`admin sign-in failed: ${signedIn.status} ${signedIn.text}`);
  return sessionCookie(signedIn.headers);
}

export const BENCH_REDIRECT_URI = 'http://127.0.0.1:9/callback';

/** An agent (and its OAuth client) created the way an admin would, ready for tests/support/oauth.ts's flow. */
export async function createOAuthAgent(
  http: HttpClient,
  baseUrl: string,
  adminCookie: string,
  agent: { slug: string; name: string },
) {
  const res = await http.post('/agents', {
    cookie: adminCookie,
    headers: { origin: baseUrl },
    json: { ...agent, description: 'benchmark', redirectUris: [BENCH_REDIRECT_URI] },
  });
  if (res.status !== 201) throw new Error(`createAgent failed: ${res.status} ${res.text}`);
  return {
    agentId: res.body.data.id,
    clientId: res.body.data.oauthClient.clientId,
    clientSecret: res.body.data.oauthClient.clientSecret,
    redirectUri: BENCH_REDIRECT_URI,
    postLogoutRedirectUri: '',
  };
}

// ---------------------------------------------------------------- autocannon

/** The part of autocannon's result the benchmarks read. */
export interface AutocannonResult {
  requests: { average: number };
  latency: { p50: number; p99: number };
  errors: number;
  timeouts: number;
  non2xx: number;
  '2xx': number;
}

export const autocannon = autocannonUntyped as (options: Record<string, unknown>) => Promise<AutocannonResult>;

/** One row's worth of a load run. */
export interface LoadFigures {
  requestsPerSec: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
}

export function loadFigures(r: AutocannonResult): LoadFigures {
  return {
    requestsPerSec: Math.round(r.requests.average),
    p50: r.latency.p50,
    p99: r.latency.p99,
    errors: r.errors + r.timeouts,
    non2xx: r.non2xx,
  };
}

/** A 1 s warm-up (so JIT and connection pools are settled), then the measured run of `seconds`. */
export async function warmedLoad(options: Record<string, unknown>, connections: number, seconds: number): Promise<LoadFigures> {
  await autocannon({ ...options, connections, duration: 1 });
  return loadFigures(await autocannon({ ...options, connections, duration: seconds }));
}

/** The columns console.table shows for a load run, after the columns naming it. */
export function loadColumns(f: LoadFigures) {
  return { 'requests/s': f.requestsPerSec, 'p50 ms': f.p50, 'p99 ms': f.p99, errors: f.errors, 'non-2xx': f.non2xx };
}

// ---------------------------------------------------------------- open loop

export interface OpenLoopFigures {
  offered: number;
  /** 2xx answers per second, over the time from the first send to the last answer */
  served: number;
  p50: number;
  p99: number;
  ok: number;
  other: number;
  /** CPU seconds the load generator (its own process) used */
  generatorCpu: number;
  /** The load generator's largest event-loop delay (ms): above a few ms, its own pause is in the latencies */
  generatorDelayMax: number;
}

/**
 * An open-loop run: `plan.rate` requests per second for `plan.seconds`, each sent at its scheduled time whether or
 * not earlier ones were answered (as independent users arrive), over keep-alive connections opened as needed.
 * Latency is measured from the scheduled send time, so a service that falls behind shows it in p99 (no coordinated
 * omission), and the served rate falls below the offered one. (autocannon's overallRate sends each second's quota in
 * a burst at the start of the second, which is not an open loop.) The requests are sent by a process of its own
 * (open-loop.ts says why).
 */
export async function openLoop(plan: OpenLoopPlan): Promise<OpenLoopFigures> {
  // with this process's flags: under `npx tsx` they load tsx, which an older Node needs for a .ts file
  const child = spawn(process.execPath, [...process.execArgv, join(import.meta.dirname, 'open-loop.ts')], { stdio: ['pipe', 'pipe', 'inherit'] });
  const output: Buffer[] = [];
  child.stdout!.on('data', (chunk: Buffer) => output.push(chunk));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  child.stdin!.end(JSON.stringify(plan));
  const code = await exited;
  if (code !== 0) throw new Error(`the open-loop generator exited with ${code}`);
  const result = JSON.parse(Buffer.concat(output).toString('utf8')) as OpenLoopResult;
  const latencies = result.latencies.sort((a, b) => a - b);
  const r2 = (n: number) => Math.round(n * 100) / 100;
  return {
    offered: plan.rate,
    served: Math.round((result.ok * 1000) / Math.max(result.elapsed, 1)),
    p50: r2(percentile(latencies, 50)),
    p99: r2(percentile(latencies, 99)),
    ok: result.ok,
    other: result.other,
    generatorCpu: result.cpu,
    generatorDelayMax: r2(result.eventLoopDelayMax),
  };
}

// ---------------------------------------------------------------- closed-loop clients

/**
 * `workers` clients each calling `one` back to back (waiting for its answer before the next) until `seconds`
 * have passed; returns the elapsed seconds.
 */
export async function closedLoop(workers: number, seconds: number, one: (worker: number) => Promise<void>): Promise<number> {
  const started = performance.now();
  const deadline = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: workers }, async (_, worker) => {
      while (performance.now() < deadline) await one(worker);
    }),
  );
  return (performance.now() - started) / 1000;
}

// ---------------------------------------------------------------- percentiles

/** Nearest-rank percentile of ascending `sorted` (NaN when empty). */
export function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/**
 * The element at floor(p% of n) of ascending `sorted` (NaN when empty): one rank above nearest-rank when p% of n
 * is whole. The auth and usage benchmarks have always reported this one; kept so their figures stay comparable.
 */
export function percentileFloor(sorted: number[], p: number): number {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

// ---------------------------------------------------------------- CPU seconds

/**
 * CPU seconds (user + system) a process and its descendants used so far, from /proc (Linux); 0 elsewhere.
 * Children that already exited count too (the root's cutime/cstime), e.g. PostgreSQL backends of a finished run.
 */
export function processTreeCpu(rootPid: number): number {
  try {
    const ticks = 100; // USER_HZ on Linux
    const stats = readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .map((d) => {
        try {
          const text = readFileSync(`/proc/${d}/stat`, 'utf8');
          const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
          const own = Number(fields[11]) + Number(fields[12]);
          const reaped = Number(d) === rootPid ? Number(fields[13]) + Number(fields[14]) : 0;
          return { pid: Number(d), ppid: Number(fields[1]), cpu: (own + reaped) / ticks };
        } catch {
          return undefined;
        }
      })
      .filter((x): x is { pid: number; ppid: number; cpu: number } => !!x);
    const tree = new Set([rootPid]);
    for (let grew = true; grew; ) {
      grew = false;
      for (const p of stats) if (!tree.has(p.pid) && tree.has(p.ppid)) (tree.add(p.pid), (grew = true));
    }
    return stats.filter((p) => tree.has(p.pid)).reduce((a, p) => a + p.cpu, 0);
  } catch {
    return 0;
  }
}

/**
 * Starts counting CPU seconds: the returned function gives those used since by the service's process tree
 * (0 without a pid) and by this process (the load generator), so a run shows where its CPU went.
 */
export function startCpuSample(
  servicePid: number | undefined,
  databasePid?: number,
): () => { service: number; generator: number; database: number } {
  const cpuBefore = process.cpuUsage();
  const serviceBefore = servicePid ? processTreeCpu(servicePid) : 0;
  const databaseBefore = databasePid ? processTreeCpu(databasePid) : 0;
  return () => {
    const used = process.cpuUsage(cpuBefore);
    return {
      service: servicePid ? processTreeCpu(servicePid) - serviceBefore : 0,
      generator: (used.user + used.system) / 1e6,
      database: databasePid ? processTreeCpu(databasePid) - databaseBefore : 0,
    };
  };
}

/** The postmaster's pid of a server started by scripts/postgres-server.ts (first line of postmaster.pid). */
export function postmasterPid(serverDir: string): number | undefined {
  try {
    return Number(readFileSync(join(serverDir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]) || undefined;
  } catch {
    return undefined;
  }
}
