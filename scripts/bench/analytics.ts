import { cpus, loadavg } from 'node:os';
import { openPostgres, rows, sql } from '../../functions/platform/db.ts';
import { migrate } from '../../functions/platform/migrations.ts';
import { startPostgres } from '../postgres-server.ts';
import { BENCH_AUTH_SECRET, cookieHeader, percentile, serveAppInProcess } from './lib.ts';

/**
 * `npx tsx scripts/bench/analytics.ts [subscriptions=100000] [usageRows=1000000] [calls=20]`
 *
 * Latency of GET /admin/analytics over HTTP (the real app, an admin's session cookie) on a throwaway PostgreSQL
 * server seeded in SQL with generate_series: 50k users, 20 agents with free / monthly / yearly tiers,
 * 100k subscriptions over the last 365 days (80% active, 10% canceled, 5% past_due, 5% incomplete), 1M usage
 * ledger rows (95% increments, 5% denied) after each subscription's start, and 30k installs. Sequential calls
 * (one admin looking at the page), p50/p99 per window. Then EXPLAIN ANALYZE of both analytics functions for the
 * default window. Figures are printed, never asserted; the goal is p50 <= 500 ms on a 2-core machine.
 */

const SUBSCRIPTIONS = Number(process.argv[2] ?? 100_000);
const USAGE_ROWS = Number(process.argv[3] ?? 1_000_000);
const CALLS = Number(process.argv[4] ?? 20);
const USERS = Math.ceil(SUBSCRIPTIONS / 2);
const AGENTS = 20;

const server = await startPostgres();
// Seeding a million rows in one statement may take longer than a request's statement_timeout (db.ts
// CONNECTION_BOUNDS, 30 s): this bench's pool has none.
const unbounded = new URL(server.url);
unbounded.searchParams.set('statement_timeout', '0');
const database = openPostgres(unbounded.href);
let app: Awaited<ReturnType<typeof serveAppInProcess>> | undefined;
try {
  await migrate(database);
  app = await serveAppInProcess(database, { NODE_ENV: 'production', AUTH_SECRET: BENCH_AUTH_SECRET, AUTH_RATE_LIMIT_PER_MINUTE: '0' }, 'error');
  const { baseUrl } = app;

  const signUp = await fetch(`${baseUrl}/api/auth/sign-up/email`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', origin: baseUrl },
    body: JSON.stringify({ email: 'bench-admin@example.test', password: 'bench-password-123', name: 'Bench Admin' }),
  });
  if (!signUp.ok) throw new Error(`sign-up failed: ${signUp.status} ${await signUp.text()}`);
  // Sign-up does not sign in (it answers the same for a new and an existing address): sign in for the cookie.
  const signIn = await fetch(`${baseUrl}/api/auth/sign-in/email`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', origin: baseUrl },
    body: JSON.stringify({ email: 'bench-admin@example.test', password: 'bench-password-123' }),
  });
  if (!signIn.ok) throw new Error(`sign-in failed: ${signIn.status} ${await signIn.text()}`);
  const cookie = cookieHeader(signIn);
  await sql`update "user" set role = 'platform_admin' where email = 'bench-admin@example.test'`.execute(database.db);

  const db = database.db;
  const t0 = performance.now();
  await sql`insert into "user" (id, name, email, "emailVerified", "createdAt", "updatedAt", role)
            select 'bench-user-' || g, 'User ' || g, 'user' || g || '@example.test', true,
                   now() - interval '400 days', now() - interval '400 days', 'user'
            from generate_series(1, ${USERS}::int) g`.execute(db);
  await sql`insert into public.agents (slug, name, description, status)
            select 'bench-agent-' || g, 'Bench agent ' || g, 'A benchmark agent', 'active'
            from generate_series(1, ${AGENTS}::int) g`.execute(db);
  await sql`insert into public.tiers (agent_id, name, price_cents, interval)
            select a.id, t.name, t.price, t.interval
            from public.agents a
            cross join (values ('Free', 0, 'month'), ('Pro', 2900, 'month'), ('Pro yearly', 29000, 'year')) t(name, price, interval)`.execute(db);
  await sql`insert into public.metric_definitions (agent_id, slug, name, kind)
            select id, 'runs', 'Runs', 'rolling' from public.agents`.execute(db);
  // Subscription k: user k mod USERS, agent (k div USERS + k mod USERS) mod 20 (so a user's two subscriptions
  // are to different agents, and every agent gets its share), a tier of
  // that agent by k mod 3, created at a random time in the last 365 days.
  await sql`with agents as (select id, row_number() over (order by slug) - 1 as n from public.agents),
                 tiers as (select t.id, t.agent_id, t.price_cents, row_number() over (partition by t.agent_id order by t.price_cents) - 1 as n
                           from public.tiers t)
            insert into public.subscriptions (user_id, agent_id, tier_id, status, current_period_start, current_period_end,
                                              canceled_at, stripe_subscription_id, created_at, updated_at, granted_access)
            select 'bench-user-' || (c.k % ${USERS} + 1), a.id, t.id, c.status, c.created, c.created + interval '30 days',
                   case when c.status = 'canceled' then least(now(), c.created + (random() * 60) * interval '1 day') end,
                   case when t.price_cents > 0 then 'sub_bench_' || c.k end, c.created, c.created,
                   c.status <> 'incomplete' -- the canceled ones were live until canceled
            from (select k, now() - random() * interval '365 days' as created,
                         case when k % 20 < 16 then 'active' when k % 20 < 18 then 'canceled'
                              when k % 20 = 18 then 'past_due' else 'incomplete' end as status
                  from generate_series(0, ${SUBSCRIPTIONS}::int - 1) k) c
            join agents a on a.n = (c.k / ${USERS} + c.k % ${USERS}) % ${AGENTS}
            join tiers t on t.agent_id = a.id and t.n = c.k % 3`.execute(db);
  await sql`create temporary table bench_subs as
              select row_number() over (order by s.id) as n, s.id, s.agent_id, s.created_at, m.id as metric_id
              from public.subscriptions s join public.metric_definitions m on m.agent_id = s.agent_id`.execute(db);
  await sql`create index on bench_subs (n)`.execute(db);
  await sql`insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, client_req_id, created_at)
            select public.quota_ledger_id(u.at), b.id, b.metric_id, case when i % 20 = 0 then 'increment_denied' else 'increment' end,
                   1, case when i % 20 = 0 then 0 else 1 end, 1, 'bench-' || i, u.at
            from generate_series(1, ${USAGE_ROWS}::int) i
            join bench_subs b on b.n = 1 + (hashint4(i) & 2147483647) % ${SUBSCRIPTIONS}
            cross join lateral (select b.created_at + random() * (now() - b.created_at) as at) u`.execute(db);
  await sql`insert into public.agent_installs (agent_id, user_id, created_at)
            select s.agent_id, s.user_id, s.created_at + interval '1 hour'
            from public.subscriptions s where hashtext(s.id::text) % 10 in (1, -1, 3) limit 30000
            on conflict do nothing`.execute(db);
  await sql`vacuum analyze`.execute(db);
  const counts = await rows<{ subs: number; ledger: number; installs: number }>(
    db,
    sql`select (select count(*) from public.subscriptions) as subs, (select count(*) from public.quota_ledger) as ledger,
               (select count(*) from public.agent_installs) as installs`,
  );
  console.log(
    `seeded in ${((performance.now() - t0) / 1000).toFixed(1)} s: ${counts[0]!.subs} subscriptions, ${counts[0]!.ledger} ledger rows, ` +
      `${counts[0]!.installs} installs, ${USERS} users, ${AGENTS} agents`,
  );

  const someAgent = (await rows<{ id: string }>(db, sql`select id from public.agents where slug = 'bench-agent-1'`))[0]!.id;
  const now = new Date();
  const day = 86_400_000;
  const windows: Array<[string, string]> = [
    ['default (last 90 days)', ''],
    ['last 365 days (every subscription)', `from=${new Date(now.getTime() - 366 * day).toISOString()}&to=${now.toISOString()}`],
    ['last 90 days, one agent', `agentId=${someAgent}`],
    ['last 30 days', `from=${new Date(now.getTime() - 30 * day).toISOString()}`],
  ];
  console.log(`\nGET /admin/analytics, ${CALLS} sequential calls per window after 3 warm-up calls`);
  for (const [label, query] of windows) {
    const url = `${baseUrl}/admin/analytics${query ? `?${query}` : ''}`;
    const call = async () => {
      const start = performance.now();
      const res = await fetch(url, { headers: { cookie } });
      const body = (await res.json()) as { data: { funnel: Record<string, number>; trends: unknown[] } };
      if (res.status !== 200) throw new Error(`status ${res.status}: ${JSON.stringify(body)}`);
      return { ms: performance.now() - start, body };
    };
    for (let i = 0; i < 3; i++) await call();
    const times: number[] = [];
    let last;
    for (let i = 0; i < CALLS; i++) {
      last = await call();
      times.push(last.ms);
    }
    times.sort((a, b) => a - b);
    const pct = (p: number) => percentile(times, p).toFixed(1);
    const f = last!.body.data.funnel;
    console.log(
      `  ${label.padEnd(36)} p50 ${pct(50).padStart(7)} ms   p99 ${pct(99).padStart(7)} ms   ` +
        `funnel ${f.purchased}/${f.activated}/${f.used}, ${last!.body.data.trends.length} weeks`,
    );
  }

  // The database's share: the two functions called directly (no HTTP, no JSON), default window.
  {
    const to = new Date();
    const from = new Date(to.getTime() - 90 * day);
    for (const fn of ['admin_analytics_funnel', 'admin_analytics_trends']) {
      const times: number[] = [];
      for (let i = 0; i < CALLS + 3; i++) {
        const start = performance.now();
        await rows(db, sql`select * from ${sql.raw(`public.${fn}`)}(${from}::timestamptz, ${to}::timestamptz, null::uuid)`);
        if (i >= 3) times.push(performance.now() - start);
      }
      times.sort((a, b) => a - b);
      console.log(`  SQL only: ${fn.padEnd(27)} p50 ${times[Math.floor(times.length / 2)]!.toFixed(1).padStart(7)} ms`);
    }
  }
  console.log(`  (load average while measuring: ${loadavg().map((l) => l.toFixed(1)).join(' ')} on ${cpus().length} cores)`);

  // The plans, for the default window. The functions are inlined SQL, so EXPLAIN shows the real plan.
  const to = now;
  const from = new Date(now.getTime() - 90 * day);
  for (const fn of ['admin_analytics_funnel', 'admin_analytics_trends']) {
    const plan = await rows<{ 'QUERY PLAN': string }>(
      db,
      sql`explain (analyze, buffers, costs off, summary on)
          select * from ${sql.raw(`public.${fn}`)}(${from}::timestamptz, ${to}::timestamptz, null::uuid)`,
    );
    console.log(`\nEXPLAIN ANALYZE ${fn} (default window):`);
    for (const line of plan) console.log(`  ${line['QUERY PLAN']}`);
  }
} finally {
  if (app) await app.close();
  await database.close();
  server.stop();
}
