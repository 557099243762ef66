import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
// @ts-expect-error autocannon ships no types
import autocannon from 'autocannon';
import { freePort, startPostgres } from '../postgres-server.ts';
import { HttpClient } from '../../tests/support/http.ts';
import { accessTokenFor } from '../../tests/support/oauth.ts';
import type { TestApp } from '../../tests/support/app.ts';
import { sessionCookie } from '../../tests/support/users.ts';

/**
 * `npx tsx scripts/bench/auth.ts [seconds] [connections]`: against the real Node entry (scripts/serve.ts as a
 * child process, NODE_ENV=production, a throwaway PostgreSQL server):
 *   1. sign-in latency (p50/p99) under 20 concurrent sign-ins (password hashing dominates);
 *   2. requests/s of GET /me with a bearer access token (JWT verified in process + one query for the user
 *      and the revocation list) versus GET /health in the same run; the goal is bearer overhead <= 2x /health.
 *   3. GET /me with the session cookie, for comparison.
 * The access token comes from the real OAuth flow (an agent created over HTTP, then authorize/consent/token).
 * Figures depend on the machine; they are printed, never asserted.
 */

const seconds = Number(process.argv[2] ?? 5);
const connections = Number(process.argv[3] ?? 32);
const SIGN_IN_CONCURRENCY = 20;
const ROUNDS = 3;
const ADMIN = { email: 'bench-admin@example.com', password: 'bench admin password' };

async function startService(env: Record<string, string>): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn(join('node_modules', '.bin', 'tsx'), ['scripts/serve.ts'], {
    env: {
      ...process.env,
      NODE_ENV: 'production',
      AUTH_SECRET: 'bench-secret-bench-secret-bench-secret!',
      AUTH_RATE_LIMIT_PER_MINUTE: '0',
      PORT: String(port),
      ADMIN_EMAIL: ADMIN.email,
      ADMIN_PASSWORD: ADMIN.password,
      ...env,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`service exited with ${child.exitCode}`);
    if (await fetch(`${url}/ready`).then((r) => r.ok, () => false)) return { url, child };
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

interface Figures {
  what: string;
  requestsPerSec: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
}

async function load(what: string, options: Record<string, unknown>, conns: number): Promise<Figures> {
  await autocannon({ ...options, connections: conns, duration: 1 }); // warm-up
  const r = await autocannon({ ...options, connections: conns, duration: seconds });
  return {
    what,
    requestsPerSec: Math.round(r.requests.average),
    p50: r.latency.p50,
    p99: r.latency.p99,
    errors: r.errors + r.timeouts,
    non2xx: r.non2xx,
  };
}

/**
 * 20 clients signing in back to back for `seconds` (each waits for its answer before the next), latencies
 * measured per sign-in. A fixed concurrency rather than a request rate: password hashing (scrypt on the
 * thread pool) bounds the throughput, and the figure that matters is how long a user waits.
 */
async function signInLoad(url: string, user: { email: string; password: string }): Promise<Figures> {
  const latencies: number[] = [];
  let errors = 0;
  let non2xx = 0;
  const body = JSON.stringify({ email: user.email, password: user.password });
  const one = async () => {
    const started = performance.now();
    try {
      const res = await fetch(`${url}/api/auth/sign-in/email`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      await res.arrayBuffer();
      if (res.status !== 200) non2xx++;
      latencies.push(performance.now() - started);
    } catch {
      errors++;
    }
  };
  await Promise.all(Array.from({ length: SIGN_IN_CONCURRENCY }, one)); // warm-up round
  latencies.length = 0;
  const started = performance.now();
  const deadline = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: SIGN_IN_CONCURRENCY }, async () => {
      while (performance.now() < deadline) await one();
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => Math.round(latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? 0);
  return {
    what: `POST /api/auth/sign-in/email (${SIGN_IN_CONCURRENCY} concurrent, ${latencies.length} sign-ins)`,
    requestsPerSec: Math.round((latencies.length / elapsed) * 10) / 10,
    p50: pct(50),
    p99: pct(99),
    errors,
    non2xx,
  };
}

/** The run with the median requests/s. */
function median(runs: Figures[]): Figures {
  return [...runs].sort((a, b) => a.requestsPerSec - b.requestsPerSec)[Math.floor(runs.length / 2)]!;
}

async function main() {
  const server = await startPostgres();
  const dataDir = mkdtempSync(join(tmpdir(), 'mkt-bench-auth-'));
  const results: Figures[] = [];
  try {
    const admin = postgres(server.url, { max: 1, onnotice: () => {} });
    await admin.unsafe('create database bench_auth');
    await admin.end();
    const service = await startService({ DATABASE_URL: server.url.replace(/\/postgres$/, '/bench_auth'), DATA_DIR: dataDir });
    try {
      const http = new HttpClient(service.url);
      // The same headers a browser front end sends (trusted origin), so production's checks apply as they would.
      const origin = { origin: service.url };
      const signedIn = await http.post('/api/auth/sign-in/email', { json: ADMIN, headers: origin });
      if (signedIn.status !== 200) throw new Error(`admin sign-in failed: ${signedIn.status} ${signedIn.text}`);
      const adminCookie = sessionCookie(signedIn.headers);

      const user = { email: 'bench-user@example.com', password: 'bench user password', name: 'Bench User' };
      const up = await http.post('/api/auth/sign-up/email', { json: user });
      if (up.status !== 200) throw new Error(`sign-up failed: ${up.status} ${up.text}`);
      const userCookie = sessionCookie(up.headers);

      // An agent (and its OAuth client) created the way an admin would, then a token through the real flow.
      const agent = await http.post('/agents', {
        cookie: adminCookie,
        headers: origin,
        json: { slug: 'bench-agent', name: 'Bench Agent', description: 'benchmark', redirectUris: ['http://127.0.0.1:9/callback'] },
      });
      if (agent.status !== 201) throw new Error(`createAgent failed: ${agent.status} ${agent.text}`);
      const client = {
        agentId: agent.body.data.id,
        clientId: agent.body.data.oauthClient.clientId,
        clientSecret: agent.body.data.oauthClient.clientSecret,
        redirectUri: 'http://127.0.0.1:9/callback',
        postLogoutRedirectUri: '',
      };
      const t = { http, baseUrl: service.url } as unknown as TestApp;
      const tokens = await accessTokenFor(t, { userId: up.body.user.id, ...user, cookie: userCookie }, { client });
      const check = await http.get('/me', { bearer: tokens.accessToken });
      if (check.status !== 200) throw new Error(`bearer /me failed: ${check.status} ${check.text}`);

      results.push(await signInLoad(service.url, user));
      // /health and bearer /me alternate for a few rounds and the medians are compared, so a burst of other
      // work on the machine hits both sides rather than one.
      const health: Figures[] = [];
      const bearer: Figures[] = [];
      const cookie: Figures[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        health.push(await load('GET /health', { url: `${service.url}/health` }, connections));
        bearer.push(await load('GET /me (bearer JWT)', { url: `${service.url}/me`, headers: { authorization: `Bearer ${tokens.accessToken}` } }, connections));
        cookie.push(await load('GET /me (session cookie)', { url: `${service.url}/me`, headers: { cookie: userCookie } }, connections));
      }
      results.push(median(health), median(bearer), median(cookie));
    } finally {
      await stop(service.child);
    }
  } finally {
    server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }

  console.log(
    `\nPostgreSQL 15 server, Node entry (NODE_ENV=production, JSON request log on), ${seconds} s per run, ` +
      `GET runs: median of ${ROUNDS} alternating rounds at ${connections} connections:\n`,
  );
  console.table(
    results.map((r) => ({
      run: r.what,
      'requests/s': r.requestsPerSec,
      'p50 ms': r.p50,
      'p99 ms': r.p99,
      errors: r.errors,
      'non-2xx': r.non2xx,
    })),
  );
  const health = results[1]!.requestsPerSec;
  const bearer = results[2]!.requestsPerSec;
  console.log(`bearer overhead: /health ${health} req/s vs bearer /me ${bearer} req/s = ${(health / Math.max(bearer, 1)).toFixed(2)}x per request (goal <= 2x)`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
