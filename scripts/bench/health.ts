import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
// @ts-expect-error autocannon ships no types
import autocannon from 'autocannon';
import { freePort, startPostgres } from '../postgres-server.ts';

/**
 * `npx tsx scripts/bench/health.ts [seconds] [connections]`: requests/s and latency of GET /health (no
 * dependency) and GET /ready (`select 1`) against the real Node entry (scripts/serve.ts, run as a child
 * process so the load generator does not share its event loop), first on the embedded database, then on a
 * throwaway PostgreSQL server. Figures depend on the machine; they are printed, never asserted.
 */

const seconds = Number(process.argv[2] ?? 5);
const connections = Number(process.argv[3] ?? 32);

interface Figures {
  target: string;
  path: string;
  requestsPerSec: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
}

async function startService(env: Record<string, string>): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn(join('node_modules', '.bin', 'tsx'), ['scripts/serve.ts'], {
    env: { ...process.env, NODE_ENV: 'production', AUTH_SECRET: 'bench-secret-bench-secret-bench-secret!', PORT: String(port), ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`service exited with ${child.exitCode}`);
    const ok = await fetch(`${url}/ready`).then((r) => r.ok, () => false);
    if (ok) return { url, child };
    if (Date.now() > deadline) throw new Error('service did not become ready');
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function stop(child: ChildProcess) {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}

async function measure(target: string, url: string, path: string): Promise<Figures> {
  // A short warm-up so JIT and connection pools are settled before the measured run.
  await autocannon({ url: `${url}${path}`, connections, duration: 1 });
  const r = await autocannon({ url: `${url}${path}`, connections, duration: seconds });
  return {
    target,
    path,
    requestsPerSec: Math.round(r.requests.average),
    p50: r.latency.p50,
    p99: r.latency.p99,
    errors: r.errors + r.timeouts,
    non2xx: r.non2xx,
  };
}

async function main() {
  const results: Figures[] = [];

  const dataDir = mkdtempSync(join(tmpdir(), 'mkt-bench-'));
  try {
    const embedded = await startService({ DATABASE_URL: '', DATA_DIR: dataDir });
    try {
      for (const path of ['/health', '/ready']) results.push(await measure('embedded (PGlite)', embedded.url, path));
    } finally {
      await stop(embedded.child);
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }

  const server = await startPostgres();
  try {
    const admin = postgres(server.url, { max: 1, onnotice: () => {} });
    await admin.unsafe('create database bench');
    await admin.end();
    const real = await startService({ DATABASE_URL: server.url.replace(/\/postgres$/, '/bench'), DATA_DIR: mkdtempSync(join(tmpdir(), 'mkt-bench-')) });
    try {
      for (const path of ['/health', '/ready']) results.push(await measure('PostgreSQL 15 server', real.url, path));
    } finally {
      await stop(real.child);
    }
  } finally {
    server.stop();
  }

  console.log(`\n${connections} connections, ${seconds} s per run (Node entry, JSON request log on):\n`);
  console.table(
    results.map((r) => ({
      database: r.target,
      path: r.path,
      'requests/s': r.requestsPerSec,
      'p50 ms': r.p50,
      'p99 ms': r.p99,
      errors: r.errors,
      'non-2xx': r.non2xx,
    })),
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
