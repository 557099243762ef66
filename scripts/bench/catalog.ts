import { first, openPostgres, sql } from '../../functions/platform/db.ts';
import { migrate } from '../../functions/platform/migrations.ts';
import { startPostgres } from '../postgres-server.ts';
import { autocannon, serveAppInProcess } from './lib.ts';

/**
 * Catalog read benchmark, in a throwaway PostgreSQL cluster against the real app over HTTP, in two parts
 * (BENCH_PART=load|reviews|all, default all):
 *
 * load: 10,000 agents (with tags, tiers and three reviews each, so the list's aggregates do real work), autocannon
 *   against GET /agents (page 1), GET /agents?cursor=... (page 500, reached by walking the cursor), GET /agents?q=...
 *   (full-text search), GET /agents/{id} (full DTO). Prints requests/s and p99 latency for each. Keyset pagination
 *   should make page 500 cost what page 1 costs.
 * reviews: what a read costs once reviews pile up (review 33: a review-bombing's throwaway accounts). N agents, newer
 *   than any other, each with M one-star reviews of M accounts and 30 older five-star ones; sequential timings
 *   (median of 7 after 2 unmeasured, min, max) of GET /agents?limit=20, GET /agents/{id} and its reviews list, and the
 *   wall time of 10 lists sent at once; then the M accounts are banned (the remedy for review-bombing: their reviews
 *   stay, hidden) and the same again. Also prints the time the seeding and the ban took (the tallies are kept as reviews
 *   and bans are written). Printed, never asserted.
 *
 *   npx tsx scripts/bench/catalog.ts            (BENCH_SECONDS=10 BENCH_CONNECTIONS=10 by default)
 *   BENCH_PART=reviews BENCH_REVIEWED_AGENTS=20 BENCH_REVIEWS=10000 npx tsx scripts/bench/catalog.ts   (the defaults)
 *   DATABASE_URL=postgres://... npx tsx scripts/bench/catalog.ts   (an empty database you can throw away)
 */

const AGENTS = 10_000;
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 10);
const PART = process.env.BENCH_PART ?? 'all';
const REVIEWED_AGENTS = Number(process.env.BENCH_REVIEWED_AGENTS ?? 20);
const REVIEWS = Number(process.env.BENCH_REVIEWS ?? 10_000);
const WORDS = ['support', 'sales', 'invoice', 'meeting', 'research', 'legal', 'hiring', 'security', 'analytics', 'translation',
  'coding', 'marketing', 'finance', 'design', 'quantum', 'logistics', 'health', 'travel', 'education', 'retail'];

async function main() {
  const server = process.env.DATABASE_URL ? undefined : await startPostgres();
  const url = process.env.DATABASE_URL ?? server!.url;
  const database = openPostgres(url, { max: 10 });
  let app: Awaited<ReturnType<typeof serveAppInProcess>> | undefined;
  try {
    await migrate(database);
    const db = database.db;
    const existing = await first<{ n: number }>(db, sql`select count(*)::int as n from agents`);
    if (existing!.n > 0) throw new Error('the benchmark needs an empty database');
    if (PART !== 'reviews') await seedLoad(db);
    app = await serveAppInProcess(
      database,
      { NODE_ENV: 'test', AUTH_SECRET: 'bench-secret-bench-secret-bench-secret-0123', AUTH_RATE_LIMIT_PER_MINUTE: '0' },
      'warn',
    );
    if (PART !== 'reviews') await load(app.baseUrl);
    if (PART !== 'load') await reviews(db, app.baseUrl);
  } finally {
    if (app) await app.close();
    await database.close();
    server?.stop();
  }
}

type BenchDb = ReturnType<typeof openPostgres>['db'];

async function seedLoad(db: BenchDb) {
  console.log(`seeding ${AGENTS} agents ...`);
  const seedStart = performance.now();
  // Created one second apart, newest first; 95% active, 5% coming soon (all listed), plus 100 draft and
  // inactive agents the public list must skip.
  await sql`
    insert into agents (slug, name, description, status, installs, created_at, updated_at)
    select 'agent-' || g,
           'Agent ' || g,
           'Helps with ' || (${JSON.stringify(WORDS)}::text::jsonb ->> (g % 20)) || ' and ' ||
             (${JSON.stringify(WORDS)}::text::jsonb ->> ((g * 7) % 20)) || ' work, number ' || g,
           case when g > ${AGENTS} then (case when g % 2 = 0 then 'draft' else 'inactive' end)
                when g % 100 < 95 then 'active' else 'coming_soon' end,
           g % 500,
           now() - make_interval(secs => g), now() - make_interval(secs => g)
    from generate_series(1, ${AGENTS + 100}) g`.execute(db);
  await sql`insert into tags (slug, name) select w, initcap(w) from jsonb_array_elements_text(${JSON.stringify(WORDS)}::text::jsonb) w`.execute(db);
  await sql`
    insert into agent_tags (agent_id, tag_id)
    select a.id, t.id from agents a
    join tags t on t.slug in (split_part(a.description, ' ', 3), split_part(a.description, ' ', 5))
    on conflict do nothing`.execute(db);
  await sql`
    insert into tiers (agent_id, name, price_cents, is_public)
    select id, 'Free', 0, true from agents
    union all select id, 'Pro', 2900, true from agents
    union all select id, 'Custom', 9900, false from agents where random() < 0.1`.execute(db);
  await sql`
    insert into reviews (agent_id, user_id, rating)
    select a.id, 'bench-user-' || r, 1 + ((abs(hashtext(a.id::text)) + r) % 5)
    from agents a, generate_series(1, 3) r`.execute(db);
  await sql`analyze`.execute(db);
  console.log(`seeded in ${((performance.now() - seedStart) / 1000).toFixed(1)} s`);
}

async function load(baseUrl: string) {
  // Walk to page 500 the way a client would.
  let cursor = '';
  let walked = 0;
  for (let page = 1; page < 500; page++) {
    const res = await fetch(`${baseUrl}/agents?limit=20${cursor ? `&cursor=${cursor}` : ''}`);
    const body = (await res.json()) as { data: unknown[]; pagination: { cursor: string; hasMore: boolean } };
    walked += body.data.length;
    if (!body.pagination.hasMore) throw new Error(`the list ended at page ${page}`);
    cursor = encodeURIComponent(body.pagination.cursor);
  }
  const page500 = (await (await fetch(`${baseUrl}/agents?limit=20&cursor=${cursor}`)).json()) as { data: unknown[] };
  console.log(`walked ${walked} agents over 499 pages; page 500 has ${page500.data.length} items`);
  const agent = (await (await fetch(`${baseUrl}/agents?limit=1`)).json()) as { data: Array<{ id: string }> };
  const search = (await (await fetch(`${baseUrl}/agents?q=quantum&limit=20`)).json()) as { data: unknown[] };
  console.log(`q=quantum returns ${search.data.length} items on its first page`);

  const targets: Array<[string, string]> = [
    ['GET /agents (page 1)', '/agents?limit=20'],
    ['GET /agents (page 500, by cursor)', `/agents?limit=20&cursor=${cursor}`],
    ['GET /agents?q=quantum', '/agents?limit=20&q=quantum'],
    ['GET /agents/{id}', `/agents/${agent.data[0]!.id}`],
  ];
  const results: Array<{ name: string; rps: number; p50: number; p99: number; errors: number }> = [];
  for (const [name, path] of targets) {
    const result = await autocannon({ url: `${baseUrl}${path}`, connections: CONNECTIONS, duration: SECONDS });
    const errors = result.errors + result.non2xx;
    results.push({ name, rps: Math.round(result.requests.average), p50: result.latency.p50, p99: result.latency.p99, errors });
  }
  console.log(`\n${AGENTS} agents, ${CONNECTIONS} connections, ${SECONDS} s per target (PostgreSQL, postgres.js pool of 10)\n`);
  console.log('| target | requests/s | p50 ms | p99 ms | errors |');
  console.log('|---|---|---|---|---|');
  for (const r of results) console.log(`| ${r.name} | ${r.rps} | ${r.p50} | ${r.p99} | ${r.errors} |`);
  const [p1, p500] = [results[0]!, results[1]!];
  console.log(`\npage 500 / page 1: throughput ${(p500.rps / p1.rps).toFixed(2)}x, p99 ${(p500.p99 / p1.p99).toFixed(2)}x (goal: within 1.2x)`);
}

async function reviews(db: BenchDb, baseUrl: string) {
  const [n, m] = [REVIEWED_AGENTS, REVIEWS];
  console.log(`\nseeding ${n} agents x ${m} one-star reviews of ${m} accounts (+30 five-star each) ...`);
  const seconds = async (work: () => Promise<unknown>) => {
    const start = performance.now();
    await work();
    return ((performance.now() - start) / 1000).toFixed(1);
  };
  const seeded = await seconds(async () => {
    // newer than every other agent, so that they are the first page of GET /agents
    await sql`insert into agents (slug, name, description, status, created_at, updated_at)
              select 'reviewed-' || g, 'Reviewed ' || g, 'Reviewed a lot', 'active', now() + make_interval(secs => g), now()
              from generate_series(1, ${n}) g`.execute(db);
    await sql`insert into "user" (id, name, email, "emailVerified")
              select 'bomber-' || g, 'x', 'bomber-' || g || '@example.test', false from generate_series(1, ${m}) g`.execute(db);
    await sql`insert into "user" (id, name, email, "emailVerified")
              select 'honest-' || g, 'x', 'honest-' || g || '@example.test', true from generate_series(1, 30) g`.execute(db);
    await sql`insert into reviews (agent_id, user_id, rating, created_at)
              select a.id, 'honest-' || g, 5, now() - interval '30 days' from agents a, generate_series(1, 30) g
               where a.slug like 'reviewed-%'`.execute(db);
    // the bombing is the newest: a list of the newest reviews meets it first
    await sql`insert into reviews (agent_id, user_id, rating, body, created_at)
              select a.id, 'bomber-' || g, 1, 'bad', now() - make_interval(secs => ${m} - g)
                from agents a, generate_series(1, ${m}) g where a.slug like 'reviewed-%'`.execute(db);
    await sql`analyze`.execute(db);
  });
  console.log(`seeded in ${seeded} s`);
  const agent = await first<{ id: string }>(db, sql`select id from agents where slug = 'reviewed-1'`);
  const targets: Array<[string, string]> = [
    ['GET /agents?limit=20', '/agents?limit=20'],
    ['GET /agents/{id}', `/agents/${agent!.id}`],
    ['GET /agents/{id}/reviews?limit=20', `/agents/${agent!.id}/reviews?limit=20`],
  ];
  const rows: string[] = [];
  const measure = async (when: string) => {
    for (const [name, path] of targets) {
      const ms: number[] = [];
      let status = 0;
      // 2 unmeasured first (the route's first calls compile its code), then 7 measured
      for (let i = 0; i < 9; i++) {
        const start = performance.now();
        const res = await fetch(baseUrl + path);
        status = res.status;
        await res.arrayBuffer();
        if (i >= 2) ms.push(performance.now() - start);
      }
      ms.sort((a, b) => a - b);
      rows.push(`| ${when} | ${name} | ${status} | ${ms[3]!.toFixed(0)} | ${ms[0]!.toFixed(0)} | ${ms[6]!.toFixed(0)} |`);
    }
    const start = performance.now();
    const statuses = await Promise.all(Array.from({ length: 10 }, () => fetch(`${baseUrl}/agents?limit=20`).then(async (r) => (await r.arrayBuffer(), r.status))));
    const wall = (performance.now() - start).toFixed(0);
    rows.push(`| ${when} | 10 x GET /agents?limit=20 at once (wall time) | ${[...new Set(statuses)].join(',')} | ${wall} | | |`);
  };
  await measure('before the ban');
  const banned = await seconds(async () => {
    await sql`update "user" set banned = true where id like 'bomber-%'`.execute(db);
    await sql`analyze`.execute(db);
  });
  console.log(`banned ${m} accounts (${n * m} reviews) in ${banned} s`);
  await measure('after the ban');
  console.log(`\n${n} agents x ${m} reviews (+30), PostgreSQL, postgres.js pool of 10; sequential requests, 7 each after 2 unmeasured\n`);
  console.log('| when | request | status | median ms | min ms | max ms |');
  console.log('|---|---|---|---|---|---|');
  for (const row of rows) console.log(row);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
