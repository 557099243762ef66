import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startPostgres } from '../postgres-server.ts';
import { HttpClient } from '../../tests/support/http.ts';
import { accessTokenFor } from '../../tests/support/oauth.ts';
import type { TestApp } from '../../tests/support/app.ts';
import { sessionCookie } from '../../tests/support/users.ts';
import {
  closedLoop,
  createDatabase,
  createOAuthAgent,
  loadColumns,
  percentileFloor,
  signInAdmin,
  startService,
  stopService,
  warmedLoad,
  type LoadFigures,
} from './lib.ts';

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

interface Figures extends LoadFigures {
  what: string;
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
  const elapsed = await closedLoop(SIGN_IN_CONCURRENCY, seconds, one);
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => Math.round(percentileFloor(latencies, p) || 0);
  return {
    what: `POST /api/auth/sign-in/email (${SIGN_IN_CONCURRENCY} concurrent, ${latencies.length} sign-ins)`,
    requestsPerSec: Math.round((latencies.length / elapsed) * 10) / 10,
    p50: pct(50),
    p99: pct(99),
    errors,
    non2xx,
  };
}

/** A warmed-up autocannon run of `options` at `connections`, named `what`. */
async function load(what: string, options: Record<string, unknown>): Promise<Figures> {
  return { what, ...(await warmedLoad(options, connections, seconds)) };
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
    const service = await startService(
      {
        AUTH_RATE_LIMIT_PER_MINUTE: '0',
        ADMIN_EMAIL: ADMIN.email,
        ADMIN_PASSWORD: ADMIN.password,
        DATABASE_URL: await createDatabase(server.url, 'bench_auth'),
        DATA_DIR: dataDir,
      },
      90_000,
    );
    try {
      const http = new HttpClient(service.url);
      const adminCookie = await signInAdmin(http, service.url, ADMIN);

      const user = { email: 'bench-user@example.com', password: 'bench user password', name: 'Bench User' };
      const up = await http.post('/api/auth/sign-up/email', { json: user });
      if (up.status !== 200) throw new Error(`sign-up failed: ${up.status} ${up.text}`);
      // Sign-up does not sign in: the cookie comes from signing in.
      const signedIn = await http.post('/api/auth/sign-in/email', { json: { email: user.email, password: user.password } });
      if (signedIn.status !== 200) throw new Error(`sign-in failed: ${signedIn.status} ${signedIn.text}`);
      const userCookie = sessionCookie(signedIn.headers);

      const client = await createOAuthAgent(http, service.url, adminCookie, { slug: 'bench-agent', name: 'Bench Agent' });
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
        health.push(await load('GET /health', { url: `${service.url}/health` }));
        bearer.push(await load('GET /me (bearer JWT)', { url: `${service.url}/me`, headers: { authorization: `Bearer ${tokens.accessToken}` } }));
        cookie.push(await load('GET /me (session cookie)', { url: `${service.url}/me`, headers: { cookie: userCookie } }));
      }
      results.push(median(health), median(bearer), median(cookie));
    } finally {
      await stopService(service);
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
      ...loadColumns(r),
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
