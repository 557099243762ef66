import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { findPostgresBin, startPostgres } from '../postgres-server.ts';
import { startFreeSubscription } from '../../functions/billing/subscriptions.ts';
import { systemClock } from '../../functions/platform/clock.ts';
import { openPostgres, sql, type Db } from '../../functions/platform/db.ts';
import { HttpClient } from '../../tests/support/http.ts';
import { accessTokenFor, TEST_REDIRECT_URI, type TestOAuthClient } from '../../tests/support/oauth.ts';
import { provisionAgentClient } from '../../functions/auth/agent-clients.ts';
import type { TestApp } from '../../tests/support/app.ts';
import { sessionCookie } from '../../tests/support/users.ts';
import {
  autocannon,
  closedLoop,
  createDatabase,
  openLoop,
  type OpenLoopFigures,
  percentileFloor as percentile,
  postmasterPid,
  signInAdmin,
  startCpuSample,
  startService,
  stopService,
} from './lib.ts';

/**
 * `npx tsx scripts/bench/usage.ts [seconds] [connections]`: the metering hot path measured against the database's
 * own limit, in one run, on a durable PostgreSQL 15 server (fsync on, synchronous commit) and the real Node entry
 * (scripts/serve.ts as a child process, NODE_ENV=production, request log on, DATABASE_POOL_SIZE = the HTTP
 * concurrency, as for pgbench's clients; BENCH_POOL_SIZE overrides it, e.g. 10 for the service's default):
 *
 *   1. raw SQL: pgbench (custom script, prepared statements) calling public.metering_increment at 32 clients over
 *      1,000 subscriptions (20 users x 50 agents), each call a new clientReqId; then the same on one hot
 *      subscription;
 *   2. HTTP POST /me/usage/{agentId}/calls/increment with each user's OAuth bearer token (from the real
 *      authorization-code flow) at 32 concurrent over the same 1,000 subscriptions;
 *   3. the same against one hot subscription;
 *   4. replays: HTTP increments repeating clientReqIds already counted in run 2;
 *   5. reserve+commit pairs: a hold of 2 units then its commit of 1 (two requests, each through the group commit), spread;
 *   6. open loop: HTTP increments at fixed offered rates (250, 500, 1,000, 2,000/s; BENCH_OPEN_LOOP_RATES), each sent
 *      on schedule whatever the answers before it, latency from the scheduled time (lib.ts openLoop).
 *   After each HTTP increment run, the service's group-commit batch sizes over that run (GET /internal/metering/batches).
 *   These run in 3 alternating rounds (raw, HTTP, raw, HTTP, ...) and the ratios compare medians, so load from
 *   elsewhere on the machine does not land on one side only.
 *   Also: the same SQL function from Node (postgres.js) at 32 connections and at 10 (the service's pool size).
 *
 * Then a quota edge under load (32 concurrent increments on a subscription with 1,000 units must admit exactly
 * 1,000) and the end-of-run audit: every counter within its effective quota, the ledger summing to every counter,
 * and every 2xx answered over HTTP recorded exactly once. Any violation exits non-zero.
 * Figures depend on the machine (2 cores shared by load generator, service and database here); printed, not asserted.
 */

const seconds = Number(process.argv[2] ?? 5);
const connections = Number(process.argv[3] ?? 32);
const USERS = 20;
const AGENTS = 50;
const SUBSCRIPTIONS = USERS * AGENTS;
const QUOTA = 100_000_000;
const EDGE_QUOTA = 1_000;
const ROUNDS = 3;
const poolSize = Number(process.env.BENCH_POOL_SIZE ?? connections);
const ADMIN = { email: 'bench-admin@example.com', password: 'bench admin password' };
/** Offered rates of the open-loop runs (issue 16), each for `seconds`, new clientReqIds over all subscriptions. */
const OPEN_LOOP_RATES = (process.env.BENCH_OPEN_LOOP_RATES ?? '250,500,1000,2000').split(',').map(Number).filter((r) => r > 0);
/** Print the database's time per statement for the first round's spread runs (see main). */
const PG_STATEMENTS = process.env.BENCH_PG_STATEMENTS === '1';
/** Where the stall traces go (see main and lib.ts startService), if anywhere. */
const TRACE_DIR = process.env.BENCH_TRACE;
/** The service's scheduler token: it also guards GET /internal/metering/batches, the batch histogram read here. */
const DRAIN_TOKEN = 'bench-drain-token-bench-drain-token-0123';

interface Figures {
  what: string;
  requestsPerSec: number;
  p50: number;
  p99: number;
  ok: number;
  other: number;
}

/** Set once the service runs: where the CPU of an HTTP run went (service vs this process's load generator). */
let servicePid: number | undefined;
/** The PostgreSQL server's postmaster: the database's CPU per request, next to the service's. */
let databasePid: number | undefined;

function printCpu(sample: { service: number; generator: number; database: number }, requests: number, generatorName: string) {
  const perRequest = (s: number) => (requests ? ((s * 1000) / requests).toFixed(2) : '-');
  console.log(
    `          CPU seconds: service ${sample.service.toFixed(1)}, database ${sample.database.toFixed(1)}, ${generatorName} ${sample.generator.toFixed(1)}` +
      `; per request: service ${perRequest(sample.service)} ms, database ${perRequest(sample.database)} ms`,
  );
}

interface Pair {
  userId: string;
  agentId: string;
  token: string;
}

/** The pgbench binary: PostgreSQL 15's, else whatever is on PATH. */
function pgbenchBin(): string | undefined {
  for (const candidate of ['/usr/lib/postgresql/15/bin/pgbench', join(findPostgresBin() ?? '/nonexistent', 'pgbench')]) {
    if (existsSync(candidate)) return candidate;
  }
  const onPath = spawnSync('sh', ['-c', 'command -v pgbench'], { encoding: 'utf8' }).stdout.trim();
  return onPath || undefined;
}

/** pgbench with a custom script; latencies from its per-transaction log. */
function pgbench(what: string, url: string, script: string, secs: number): Figures {
  const bin = pgbenchBin()!;
  const cpu = startCpuSample(undefined, databasePid);
  const dir = mkdtempSync(join(tmpdir(), 'mkt-pgbench-'));
  try {
    const file = join(dir, 'script.sql');
    writeFileSync(file, script);
    const u = new URL(url);
    const args = ['-n', '-M', 'prepared', '-c', String(connections), '-j', '2', '-T', String(secs), '-f', file,
      '-h', u.hostname, '-p', u.port, '-U', u.username, '-l', '--log-prefix', join(dir, 'log'), u.pathname.slice(1)];
    const run = spawnSync(bin, args, { encoding: 'utf8', env: { ...process.env, PGPASSWORD: decodeURIComponent(u.password) } });
    if (run.status !== 0) throw new Error(`pgbench failed: ${run.stderr}`);
    const failed = Number(/number of failed transactions: (\d+)/.exec(run.stdout)?.[1] ?? 0);
    const latencies: number[] = [];
    for (const f of readdirSync(dir).filter((n) => n.startsWith('log'))) {
      for (const line of readFileSync(join(dir, f), 'utf8').split('\n')) {
        const parts = line.trim().split(/\s+/);
        if (parts.length >= 3) latencies.push(Number(parts[2]) / 1000);
      }
    }
    latencies.sort((a, b) => a - b);
    const tps = Number(/tps = ([\d.]+) \(without initial connection time\)/.exec(run.stdout)?.[1] ?? latencies.length / secs);
    const figures = { what, requestsPerSec: Math.round(tps), p50: round(percentile(latencies, 50)), p99: round(percentile(latencies, 99)), ok: latencies.length, other: failed };
    progress(figures);
    printCpu(cpu(), latencies.length, 'pgbench (not measured)');
    return figures;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const round = (n: number) => Math.round(n * 100) / 100;

/** autocannon; `next` builds each request (path, body, token). */
async function http(
  what: string,
  url: string,
  next: () => { path: string; token: string; body: string },
  run: { seconds: number } | { requests: number },
): Promise<Figures> {
  const cpu = startCpuSample(servicePid, databasePid);
  const r = await autocannon({
    url,
    connections,
    ...('seconds' in run ? { duration: run.seconds } : { amount: run.requests }),
    timeout: 30,
    requests: [
      {
        method: 'POST',
        setupRequest: (req: Record<string, unknown>) => {
          const n = next();
          return {
            ...req,
            path: n.path,
            body: n.body,
            headers: { 'content-type': 'application/json', authorization: `Bearer ${n.token}` },
          };
        },
      },
    ],
  });
  const figures = { what, requestsPerSec: Math.round(r.requests.average), p50: r.latency.p50, p99: r.latency.p99, ok: r['2xx'], other: r.non2xx + r.errors + r.timeouts };
  progress(figures);
  printCpu(cpu(), r['2xx'] + r.non2xx, 'load generator (autocannon, this process)');
  return figures;
}

/**
 * Reserve then commit, as an agent backend does around an action whose cost is known only afterwards: each
 * connection sends POST .../calls/reservations {amount: 2}, then POST .../reservations/{id}/commit {amount: 1}
 * with the id it got. Figures count pairs (requests / 2). Reservations run their own statement, outside the
 * increments' group commit, so this is what a hold-and-settle costs next to a plain increment.
 */
async function holdThenCommit(
  what: string,
  url: string,
  next: () => { agentId: string; token: string; clientReqId: string },
  secs: number,
): Promise<Figures> {
  const cpu = startCpuSample(servicePid, databasePid);
  let failedPairs = 0;
  const r = await autocannon({
    url,
    connections,
    duration: secs,
    timeout: 30,
    requests: [
      {
        method: 'POST',
        setupRequest: (req: Record<string, unknown>, context: Record<string, unknown>) => {
          const n = next();
          context.agentId = n.agentId;
          context.token = n.token;
          return {
            ...req,
            path: `/me/usage/${n.agentId}/calls/reservations`,
            body: JSON.stringify({ clientReqId: n.clientReqId, amount: 2, ttlSeconds: 60 }),
            headers: { 'content-type': 'application/json', authorization: `Bearer ${n.token}` },
          };
        },
        onResponse: (status: number, body: string, context: Record<string, unknown>) => {
          context.reservationId = status === 201 ? JSON.parse(body).data.id : undefined;
          if (status !== 201) failedPairs++;
        },
      },
      {
        method: 'POST',
        setupRequest: (req: Record<string, unknown>, context: Record<string, unknown>) => ({
          ...req,
          // a failed hold leaves no id: the commit then goes to a well-formed unknown id and answers 404 (counted)
          path: `/me/usage/${context.agentId}/reservations/${context.reservationId ?? '00000000-0000-4000-8000-000000000000'}/commit`,
          body: '{"amount":1}',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${context.token}` },
        }),
      },
    ],
  });
  const answered = r['2xx'] + r.non2xx;
  const figures = {
    what,
    requestsPerSec: Math.round(r.requests.average / 2),
    p50: r.latency.p50,
    p99: r.latency.p99,
    ok: Math.floor(r['2xx'] / 2),
    other: r.non2xx + r.errors + r.timeouts + failedPairs,
  };
  progress(figures);
  printCpu(cpu(), answered, 'load generator (autocannon, this process)');
  return figures;
}

function progress(f: Figures) {
  console.log(`${new Date().toISOString().slice(11, 19)}  ${f.what}: ${f.requestsPerSec}/s, p50 ${f.p50} ms, p99 ${f.p99} ms, ${f.ok} ok, ${f.other} other`);
}

/** The same SQL function called from Node through postgres.js, 32 connections, one call in flight per connection. */
async function nodeDriver(what: string, url: string, pick: (i: number) => Pair, secs: number, conns = connections): Promise<Figures> {
  const client = postgres(url, { max: conns, onnotice: () => {} });
  const latencies: number[] = [];
  let n = 0;
  let failed = 0;
  await closedLoop(conns, secs, async (worker) => {
    const i = n++;
    const p = pick(i);
    const started = performance.now();
    try {
      await client`select * from public.metering_increment(${p.userId}, ${p.agentId}, 'calls', ${`n-${worker}-${i}`}, 1, ${new Date()})`;
      latencies.push(performance.now() - started);
    } catch {
      failed++;
    }
  });
  await client.end();
  latencies.sort((a, b) => a - b);
  const figures = { what, requestsPerSec: Math.round(latencies.length / secs), p50: round(percentile(latencies, 50)), p99: round(percentile(latencies, 99)), ok: latencies.length, other: failed };
  progress(figures);
  return figures;
}

type Histogram = Map<number, number>;

/** The service's group-commit batch sizes so far (GET /internal/metering/batches). */
async function batchHistogram(url: string): Promise<Histogram> {
  const res = await fetch(`${url}/internal/metering/batches`, { headers: { authorization: `Bearer ${DRAIN_TOKEN}` } });
  if (!res.ok) throw new Error(`batch histogram: ${res.status} ${await res.text()}`);
  const { data } = (await res.json()) as { data: { batches: Array<{ size: number; count: number }> } };
  return new Map(data.batches.map((b) => [b.size, b.count]));
}

/** The batches sent between two readings, bucketed by size (1, 2-3, 4-7, ...): batches and the share of calls. */
function printBatches(before: Histogram, after: Histogram) {
  const buckets = new Map<number, { batches: number; calls: number }>();
  let calls = 0;
  let batches = 0;
  for (const [size, count] of after) {
    const n = count - (before.get(size) ?? 0);
    if (n <= 0) continue;
    const low = 2 ** Math.floor(Math.log2(size));
    const b = buckets.get(low) ?? { batches: 0, calls: 0 };
    b.batches += n;
    b.calls += n * size;
    buckets.set(low, b);
    calls += n * size;
    batches += n;
  }
  if (!batches) return console.log('          batches: none');
  const line = [...buckets]
    .sort(([a], [b]) => a - b)
    .map(([low, b]) => `${low === 1 ? '1' : `${low}-${low * 2 - 1}`}: ${b.batches} (${Math.round((100 * b.calls) / calls)}% of calls)`)
    .join(', ');
  console.log(`          batches: ${batches} for ${calls} calls, ${(calls / batches).toFixed(1)} calls per batch; by size: ${line}`);
}

async function resetStatements(db: Db) {
  await sql`create extension if not exists pg_stat_statements`.execute(db);
  await sql`select pg_stat_statements_reset()`.execute(db);
}

/** The statements that took the database's time in the run just done, per increment answered (`calls`). */
async function printStatements(db: Db, calls: number) {
  const { rows } = await sql<{ query: string; calls: string; ms: number }>`
    select regexp_replace(query, '[[:space:]]+', ' ', 'g') as query, calls, total_exec_time as ms
      from pg_stat_statements where query not ilike '%pg_stat_statements%'
     order by total_exec_time desc limit 20`.execute(db);
  console.log(`          database time per statement (pg_stat_statements, track=all; nested statements count inside their caller too), per increment:`);
  for (const r of rows) {
    console.log(`          ${((r.ms * 1000) / calls).toFixed(1).padStart(7)} us  ${(Number(r.calls) / calls).toFixed(2).padStart(6)} calls  ${r.query.slice(0, 150)}`);
  }
}

async function main() {
  if (!pgbenchBin()) throw new Error('pgbench not found (install postgresql 15)');
  const server = await startPostgres({
    durable: true,
    // BENCH_PG_STATEMENTS=1: where the database's time goes, statement by statement, including those run inside the
    // metering functions (track=all). It costs time of its own: figures from such a run are not the headline ones.
    settings: {
      ...(PG_STATEMENTS ? { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track': 'all' } : {}),
      // BENCH_TRACE=<dir>: the server logs statements over 25 ms, every autovacuum run and every checkpoint, with
      // millisecond times, kept as <dir>/postgres.log (next to the service's GC trace: lib.ts startService)
      ...(TRACE_DIR ? { log_min_duration_statement: '25', log_autovacuum_min_duration: '0', log_checkpoints: 'on', log_line_prefix: '%m:%p:' } : {}),
    },
  });
  const dataDir = mkdtempSync(join(tmpdir(), 'mkt-bench-usage-'));
  const results: Figures[] = [];
  const rounds: Record<'sqlSpread' | 'httpSpread' | 'sqlHot' | 'httpHot' | 'httpReplay' | 'httpHoldCommit', Figures[]> = {
    sqlSpread: [],
    httpSpread: [],
    sqlHot: [],
    httpHot: [],
    httpReplay: [],
    httpHoldCommit: [],
  };
  const openLoops: OpenLoopFigures[] = [];
  let failures = 0;
  const fail = (message: string) => {
    failures++;
    console.error(`FAILED: ${message}`);
  };
  try {
    const dbUrl = await createDatabase(server.url, 'bench_usage');
    const service = await startService(
      {
        AUTH_RATE_LIMIT_PER_MINUTE: '0',
        ADMIN_EMAIL: ADMIN.email,
        ADMIN_PASSWORD: ADMIN.password,
        DATABASE_URL: dbUrl,
        DATA_DIR: dataDir,
        DATABASE_POOL_SIZE: String(poolSize),
        DRAIN_TOKEN,
      },
      120_000,
    );
    servicePid = service.child.pid;
    databasePid = postmasterPid(server.dir);
    const database = openPostgres(dbUrl, { max: 4 });
    const db = database.db;
    try {
      // ---- setup: users and tokens through the real flows, catalog rows in SQL, subscriptions through the service
      const client = new HttpClient(service.url);
      await signInAdmin(client, service.url, ADMIN); // the admin account exists and signs in (as in every bench)
      const t = { http: client, baseUrl: service.url } as unknown as TestApp;

      const agents: string[] = [];
      // Tokens act only within their agent (contract rev. 2): every agent gets its own OAuth client, and every
      // (user, agent) pair its own token from that client.
      const clients: TestOAuthClient[] = [];
      for (let a = 0; a < AGENTS; a++) {
        const { rows } = await sql<{ agent_id: string }>`
          with agent as (insert into agents (slug, name, status) values (${`bench-${a}`}, ${`Bench ${a}`}, 'active') returning id),
               tier as (insert into tiers (agent_id, name, price_cents) select id, 'Free', 0 from agent returning id, agent_id),
               metric as (insert into metric_definitions (agent_id, slug, name, kind) select id, 'calls', 'Calls', 'rolling' from agent returning id)
          insert into tier_quotas (tier_id, metric_id, quota_limit) select tier.id, metric.id, ${QUOTA} from tier, metric
          returning (select agent_id from tier)`.execute(db);
        agents.push(rows[0]!.agent_id);
        const credentials = await db.transaction().execute((trx) =>
          provisionAgentClient({ clock: systemClock }, trx, { agentId: rows[0]!.agent_id, name: `Bench ${a}`, redirectUris: [TEST_REDIRECT_URI] }),
        );
        clients.push({ agentId: rows[0]!.agent_id, ...credentials, redirectUri: TEST_REDIRECT_URI, postLogoutRedirectUri: '' });
      }
      const pairs: Pair[] = [];
      for (let u = 0; u < USERS; u++) {
        const user = { email: `bench-user-${u}@example.com`, password: `bench user password ${u}`, name: `Bench User ${u}` };
        const up = await client.post('/api/auth/sign-up/email', { json: user });
        if (up.status !== 200) throw new Error(`sign-up failed: ${up.status} ${up.text}`);
        const userId = up.body.user.id as string;
        // Sign-up does not sign in: the cookie comes from signing in.
        const signedIn = await client.post('/api/auth/sign-in/email', { json: { email: user.email, password: user.password } });
        if (signedIn.status !== 200) throw new Error(`sign-in failed: ${signedIn.status} ${signedIn.text}`);
        const signedInUser = { userId, ...user, cookie: sessionCookie(signedIn.headers) };
        for (const [a, agentId] of agents.entries()) {
          const { rows } = await sql<{ id: string }>`select id from tiers where agent_id = ${agentId}`.execute(db);
          await startFreeSubscription(db, systemClock, { userId, tierId: rows[0]!.id });
          const tokens = await accessTokenFor(t, signedInUser, { client: clients[a]! });
          pairs.push({ userId, agentId, token: tokens.accessToken });
        }
      }
      // pgbench picks a subscription by number; this table maps it to (user, agent) inside the same statement.
      await sql`create table bench_pairs (i int primary key, user_id text not null, agent_id uuid not null)`.execute(db);
      for (const [i, p] of pairs.entries()) await sql`insert into bench_pairs values (${i}, ${p.userId}, ${p.agentId})`.execute(db);
      await sql`vacuum analyze`.execute(db);
      const hot = pairs[0]!;
      const check = await client.post(`/me/usage/${hot.agentId}/calls/increment`, { bearer: hot.token, json: { clientReqId: 'bench-check' } });
      if (check.status !== 200) throw new Error(`bearer increment failed: ${check.status} ${check.text}`);
      console.log(`setup: ${SUBSCRIPTIONS} subscriptions (${USERS} users x ${AGENTS} agents), ${USERS} bearer tokens from the OAuth flow`);

      // ---- 1. raw SQL (pgbench), spread and hot
      const spreadScript = `\\set i random(0, ${SUBSCRIPTIONS - 1})
\\set r random(1, 4000000000000000000)
select m.* from bench_pairs p, public.metering_increment(p.user_id, p.agent_id, 'calls', 'pgb-' || :client_id || '-' || :r, 1, now()) m where p.i = :i;
`;
      const hotScript = `\\set r random(1, 4000000000000000000)
select * from public.metering_increment('${hot.userId}', '${hot.agentId}', 'calls', 'pgbh-' || :client_id || '-' || :r, 1, now());
`;
      // HTTP spread requests walk all 1,000 subscriptions (neighbours far apart); every clientReqId is kept for replays
      const sent: Array<{ pair: number; key: string }> = [];
      let n = 0;
      const spreadNext = () => {
        const i = n++;
        const pair = (i * 7919) % SUBSCRIPTIONS;
        const key = `h-${i}`;
        sent.push({ pair, key });
        const p = pairs[pair]!;
        return { path: `/me/usage/${p.agentId}/calls/increment`, token: p.token, body: `{"clientReqId":"${key}"}` };
      };
      // reserve+commit pairs walk the subscriptions too (another stride), each hold 2 units committed as 1
      let k = 0;
      const holdNext = () => {
        const i = k++;
        const p = pairs[(i * 104729) % SUBSCRIPTIONS]!;
        return { agentId: p.agentId, token: p.token, clientReqId: `rc-${i}` };
      };
      let h = 0;
      const hotNext = () => ({ path: `/me/usage/${hot.agentId}/calls/increment`, token: hot.token, body: `{"clientReqId":"hh-${h++}"}` });

      // Warm-up: the measured rounds should see a warmed service (V8 has optimised the request path; a service in
      // production runs warm), so both HTTP paths run first for a while, and pgbench once.
      pgbench('warm-up', dbUrl, spreadScript, 2);
      await http('warm-up', service.url, spreadNext, { seconds: 6 });
      await http('warm-up (hot)', service.url, hotNext, { seconds: 2 });
      results.push(await nodeDriver(`raw SQL from Node (postgres.js), ${connections} conns, ${SUBSCRIPTIONS} subscriptions`, dbUrl, (i) => pairs[(i * 7919) % SUBSCRIPTIONS]!, seconds));
      // the service's default pool is 10 connections: the same driver at that size shows what such a pool alone allows
      results.push(await nodeDriver(`raw SQL from Node (postgres.js), 10 conns (the service's default pool), ${SUBSCRIPTIONS} subscriptions`, dbUrl, (i) => pairs[(i * 104729) % SUBSCRIPTIONS]!, seconds, 10));

      // Rounds alternate raw SQL and HTTP runs, so load from elsewhere on the machine does not land on one side only;
      // the ratios compare the medians.
      for (let round = 1; round <= ROUNDS; round++) {
        const profile = PG_STATEMENTS && round === 1;
        if (profile) await resetStatements(db);
        rounds.sqlSpread.push(pgbench(`[${round}] raw SQL: pgbench, ${connections} clients, ${SUBSCRIPTIONS} subscriptions`, dbUrl, spreadScript, seconds));
        if (profile) await printStatements(db, rounds.sqlSpread.at(-1)!.ok);
        let batchesBefore = await batchHistogram(service.url);
        if (profile) await resetStatements(db);
        rounds.httpSpread.push(await http(`[${round}] HTTP bearer, ${connections} concurrent, ${SUBSCRIPTIONS} subscriptions`, service.url, spreadNext, { seconds }));
        if (profile) await printStatements(db, rounds.httpSpread.at(-1)!.ok);
        printBatches(batchesBefore, (batchesBefore = await batchHistogram(service.url)));
        rounds.sqlHot.push(pgbench(`[${round}] raw SQL: pgbench, ${connections} clients, 1 hot subscription`, dbUrl, hotScript, seconds));
        rounds.httpHot.push(await http(`[${round}] HTTP bearer, ${connections} concurrent, 1 hot subscription`, service.url, hotNext, { seconds }));
        printBatches(batchesBefore, await batchHistogram(service.url));
        // replays of clientReqIds already counted (the last few generated may not have been sent: skip the newest 10%)
        const replayable = sent.slice(0, Math.floor(sent.length * 0.9));
        let r = 0;
        const replayNext = () => {
          const s = replayable[r++ % replayable.length]!;
          const p = pairs[s.pair]!;
          return { path: `/me/usage/${p.agentId}/calls/increment`, token: p.token, body: `{"clientReqId":"${s.key}"}` };
        };
        rounds.httpReplay.push(await http(`[${round}] HTTP bearer replays, ${connections} concurrent`, service.url, replayNext, { seconds }));
        rounds.httpHoldCommit.push(
          await holdThenCommit(`[${round}] HTTP reserve 2 + commit 1 pairs, ${connections} concurrent, ${SUBSCRIPTIONS} subscriptions`, service.url, holdNext, seconds),
        );
      }
      // ---- open loop: fixed offered rates, each request sent on schedule whatever the answers before it
      // every subscription's request, and the order the requests walk them in: never the quota edge's subscription
      // (pairs[1]): the edge run below resets its ledger, and the audit counts every open-loop 2xx in the ledger
      const targets = pairs.map((p) => ({
        path: `/me/usage/${p.agentId}/calls/increment`,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${p.token}` },
      }));
      const picks = Array.from({ length: SUBSCRIPTIONS }, (_, i) => (i * 6151) % SUBSCRIPTIONS).map((pick) => (pick === 1 ? 2 : pick));
      for (const rate of OPEN_LOOP_RATES) {
        const batchesBefore = await batchHistogram(service.url);
        const cpu = startCpuSample(servicePid, databasePid);
        const f = await openLoop({ url: service.url, rate, seconds, targets, picks, keyPrefix: `o-${rate}-` });
        openLoops.push(f);
        console.log(
          `${new Date().toISOString().slice(11, 19)}  open loop, offered ${rate}/s for ${seconds} s: served ${f.served}/s, p50 ${f.p50} ms, p99 ${f.p99} ms, ${f.ok} ok, ${f.other} other`,
        );
        printCpu({ ...cpu(), generator: f.generatorCpu }, f.ok + f.other, 'load generator (open loop, its own process)');
        console.log(`          load generator's largest event-loop delay: ${f.generatorDelayMax} ms`);
        printBatches(batchesBefore, await batchHistogram(service.url));
      }

      const httpSpreadOther = rounds.httpSpread.reduce((a, f) => a + f.other, 0);
      const httpHotOther = rounds.httpHot.reduce((a, f) => a + f.other, 0);
      const httpReplayOther = rounds.httpReplay.reduce((a, f) => a + f.other, 0);
      const httpHoldCommitOther = rounds.httpHoldCommit.reduce((a, f) => a + f.other, 0);

      // ---- quota edge under load: exactly EDGE_QUOTA admitted
      const edge = pairs[1]!;
      await sql`update tier_quotas set quota_limit = ${EDGE_QUOTA} where tier_id = (select id from tiers where agent_id = ${edge.agentId})`.execute(db);
      await sql`delete from usage_counters where subscription_id = (select id from subscriptions where user_id = ${edge.userId} and agent_id = ${edge.agentId})`.execute(db);
      await sql`delete from quota_ledger where subscription_id = (select id from subscriptions where user_id = ${edge.userId} and agent_id = ${edge.agentId})`.execute(db);
      // and its holds: the reserve+commit runs walk every subscription, and one whose run ended between a hold and
      // its commit leaves a live hold (2 units, 60 s), which the edge would rightly count against the 1,000
      await sql`delete from usage_reservations where subscription_id = (select id from subscriptions where user_id = ${edge.userId} and agent_id = ${edge.agentId})`.execute(db);
      let e = 0;
      const edgeRun = await http(
        `HTTP bearer, ${connections} concurrent, quota ${EDGE_QUOTA} (edge)`,
        service.url,
        () => ({ path: `/me/usage/${edge.agentId}/calls/increment`, token: edge.token, body: `{"clientReqId":"e-${e++}"}` }),
        { requests: EDGE_QUOTA + 500 },
      );
      results.push(edgeRun);
      const [edgeRow] = (
        await sql<{ used: number; admitted: number }>`
          select coalesce((select sum(used)::int from usage_counters where subscription_id = s.id), 0) as used,
                 (select count(*)::int from quota_ledger where subscription_id = s.id and event = 'increment') as admitted
          from subscriptions s where s.user_id = ${edge.userId} and s.agent_id = ${edge.agentId}`.execute(db)
      ).rows;
      console.log(`quota edge: ${edgeRun.ok + edgeRun.other} requests, ${edgeRun.ok} admitted over HTTP, counter ${edgeRow!.used}, ${edgeRow!.admitted} ledger increments, quota ${EDGE_QUOTA}`);
      if (edgeRun.ok + edgeRun.other <= EDGE_QUOTA) fail('quota edge: too few requests to reach the quota');
      if (edgeRun.ok !== EDGE_QUOTA || edgeRow!.used !== EDGE_QUOTA || edgeRow!.admitted !== EDGE_QUOTA) {
        fail(`quota edge: expected exactly ${EDGE_QUOTA} admitted`);
      }

      // ---- audit
      const [audit] = (
        await sql<{ counters: number; over: number; ledger_mismatch: number; http_rows: number; open_rows: number; replays_counted: number }>`
          select
            (select count(*)::int from usage_counters) as counters,
            (select count(*)::int from usage_counters c join subscriptions s on s.id = c.subscription_id
               where c.used > coalesce(public.metering_effective_limit(s.id, s.tier_id, c.metric_id, c.period_start), c.used)) as over,
            (select count(*)::int from usage_counters c
               where c.used <> coalesce((select sum(l.delta) from quota_ledger l where l.subscription_id = c.subscription_id
                                           and l.metric_id = c.metric_id and l.period_start = c.period_start), 0)) as ledger_mismatch,
            (select count(*)::int from quota_ledger where client_req_id like 'h-%' and event = 'increment') as http_rows,
            (select count(*)::int from quota_ledger where client_req_id like 'o-%' and event = 'increment') as open_rows,
            (select count(*)::int from (select client_req_id from quota_ledger where client_req_id is not null
               group by metric_id, subscription_id, client_req_id having count(*) > 1) d) as replays_counted`.execute(db)
      ).rows;
      const spreadAnswered = sent.length; // every generated spread request (warm-up and rounds), answered 2xx (checked below)
      console.log(
        `\naudit: ${audit!.counters} counters, ${audit!.over} above their effective quota, ${audit!.ledger_mismatch} not equal to their ledger sum, ` +
          `${audit!.replays_counted} clientReqIds counted twice; HTTP spread runs generated ${spreadAnswered} increments, ${audit!.http_rows} recorded`,
      );
      if (audit!.over !== 0) fail('a counter is above its effective quota');
      if (audit!.ledger_mismatch !== 0) fail('a counter differs from its ledger sum');
      if (audit!.replays_counted !== 0) fail('a clientReqId was counted twice');
      if (httpSpreadOther + httpHotOther + httpReplayOther + httpHoldCommitOther !== 0) fail('non-2xx answers in the HTTP runs');
      // autocannon may stop with requests generated but unanswered at the deadline: recorded <= sent, and every
      // answered 2xx is recorded (warm-up + run 2 answered count vs rows)
      if (audit!.http_rows > spreadAnswered) fail('more increments recorded than sent');
      // the open loop waits for every answer: each 2xx is one ledger row, and nothing else is
      const openOk = openLoops.reduce((a, f) => a + f.ok, 0);
      console.log(`open loop: ${openOk} answered 2xx, ${audit!.open_rows} recorded`);
      if (audit!.open_rows !== openOk) fail('open loop: the increments answered 2xx and the ledger rows differ');
      if (openLoops.some((f) => f.other > 0)) fail('non-2xx answers in the open-loop runs');
    } finally {
      await database.close();
      await stopService(service);
    }
  } finally {
    if (TRACE_DIR) writeFileSync(join(TRACE_DIR, 'postgres.log'), readFileSync(join(server.dir, 'server.log')));
    server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }

  const median = (list: Figures[], what: string): Figures => {
    const by = (k: 'requestsPerSec' | 'p50' | 'p99') => [...list].map((f) => f[k]).sort((a, b) => a - b)[Math.floor(list.length / 2)]!;
    return { what, requestsPerSec: by('requestsPerSec'), p50: by('p50'), p99: by('p99'), ok: list.reduce((a, f) => a + f.ok, 0), other: list.reduce((a, f) => a + f.other, 0) };
  };
  const sqlSpread = median(rounds.sqlSpread, `raw SQL: pgbench, ${connections} clients, ${SUBSCRIPTIONS} subscriptions`);
  const httpSpread = median(rounds.httpSpread, `HTTP POST increment (bearer), ${connections} concurrent, same subscriptions`);
  const sqlHot = median(rounds.sqlHot, `raw SQL: pgbench, ${connections} clients, 1 hot subscription`);
  const httpHot = median(rounds.httpHot, `HTTP POST increment (bearer), ${connections} concurrent, 1 hot subscription`);
  const httpReplay = median(rounds.httpReplay, `HTTP replays of counted clientReqIds, ${connections} concurrent`);
  const httpHoldCommit = median(rounds.httpHoldCommit, `HTTP reserve + commit pairs (pairs/s; p50/p99 per request), ${connections} concurrent`);
  const table = [sqlSpread, httpSpread, sqlHot, httpHot, httpReplay, httpHoldCommit, ...results];
  console.log(`\nPostgreSQL 15 (durable: fsync on, synchronous commit), Node entry (NODE_ENV=production, request log on, pool of ${poolSize}), ${seconds} s per run;`);
  console.log(`first six rows: medians of ${ROUNDS} alternating rounds (2xx/ok and other: totals over the rounds)\n`);
  console.table(table.map((r) => ({ run: r.what, 'requests/s': r.requestsPerSec, 'p50 ms': r.p50, 'p99 ms': r.p99, '2xx/ok': r.ok, other: r.other })));
  if (openLoops.length) {
    console.log(`\nopen loop (${seconds} s per rate, new clientReqIds over ${SUBSCRIPTIONS} subscriptions; latency from the scheduled send time):\n`);
    console.table(openLoops.map((f) => ({ 'offered/s': f.offered, 'served/s': f.served, 'p50 ms': f.p50, 'p99 ms': f.p99, '2xx': f.ok, other: f.other })));
  }
  const ratio = (a: Figures, b: Figures) => (a.requestsPerSec / Math.max(b.requestsPerSec, 1)).toFixed(2);
  // Goals of issue 16 (this 2-core machine): HTTP spread >= 2,000/s and >= 1.3x pgbench; hot >= 1.0x pgbench hot;
  // replays >= 2x new increments; open loop all served with p99 <= 25 ms at 1,000/s and <= 50 ms at 2,000/s.
  console.log(`\nHTTP spread: ${httpSpread.requestsPerSec}/s (goal >= 2000/s), HTTP / raw SQL ${ratio(httpSpread, sqlSpread)} (goal >= 1.3)`);
  console.log(`HTTP / raw SQL, hot: ${ratio(httpHot, sqlHot)} (goal >= 1.0)`);
  console.log(`replays / new increments over HTTP: ${ratio(httpReplay, httpSpread)}x (goal >= 2x)`);
  for (const f of openLoops.filter((o) => o.offered === 1000 || o.offered === 2000)) {
    const goal = f.offered === 1000 ? 25 : 50;
    console.log(`open loop ${f.offered}/s: ${f.served}/s served, p99 ${f.p99} ms (goal: all served, p99 <= ${goal} ms)`);
  }
  console.log(`reserve+commit pairs / increments over HTTP: ${ratio(httpHoldCommit, httpSpread)} (two requests and two batched calls per pair)`);
  console.log(failures ? `\n${failures} check(s) FAILED` : '\nzero over-admission: every check passed');
  if (failures) process.exit(1);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
