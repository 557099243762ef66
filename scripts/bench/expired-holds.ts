import { startPostgres } from '../postgres-server.ts';
import { openPostgres, sql } from '../../functions/platform/db.ts';
import { migrate } from '../../functions/platform/migrations.ts';

/**
 * `node scripts/bench/expired-holds.ts [holds...]`: what a reserve costs on a counter where an agent let many holds
 * expire together. The reserve settles the counter's expired holds under the counter's lock, inside the group
 * commit's one transaction, so its time is a stall for every other call of its batch. For each N: N holds of 1 unit
 * on one unlimited metric, all expired, then one reserve on that counter through public.metering_reserve (the SQL the
 * batch runs for it), timed, and then how many holds it settled. PostgreSQL 15, not durable. Printed, never asserted.
 * Before migration 20261126000600 a reserve settled all N, each ledger row summing the counter's holds again
 * (N scans of N rows).
 */

const sizes = (process.argv.slice(2).length ? process.argv.slice(2) : ['2000', '8000', '32000']).map(Number);

async function main() {
  const server = await startPostgres();
  const database = openPostgres(server.url, { max: 2 });
  const db = database.db;
  try {
    await migrate(database);
    console.log('holds expired | reserve ms | settled by it | still held');
    for (const n of sizes) {
      const { rows } = await sql<{ agent: string; metric: string; sub: string; user: string }>`
        with a as (insert into agents (slug, name, status) values (${`bench-${n}`}, 'bench', 'active') returning id),
             t as (insert into tiers (agent_id, name, price_cents, currency, interval, is_public)
                   select id, 'Free', 0, 'usd', 'month', true from a returning id, agent_id),
             m as (insert into metric_definitions (agent_id, slug, name, kind) select id, 'jobs', 'jobs', 'fixed' from a returning id),
             q as (insert into tier_quotas (tier_id, metric_id, quota_limit) select t.id, m.id, null from t, m returning 1),
             u as (insert into "user" (id, name, email, "emailVerified", role)
                   values (${`u-bench-${n}`}, 'bench', ${`bench-${n}@example.test`}, true, 'user') returning id),
             s as (insert into subscriptions (user_id, agent_id, tier_id, status, current_period_start, current_period_end,
                                              created_at, updated_at)
                   select u.id, t.agent_id, t.id, 'active', now() - interval '1 day', now() + interval '29 days',
                          now() - interval '1 day', now() - interval '1 day' from u, t returning id)
        select (select agent_id from t) as agent, (select id from m) as metric, (select id from s) as sub, (select id from u) as user`.execute(db);
      const { agent, metric, sub, user } = rows[0]!;
      await sql`
        insert into usage_reservations (subscription_id, metric_id, counter_key, period_start, client_req_id, amount,
                                        ttl_seconds, status, expires_at, created_at)
        select ${sub}, ${metric}, '-infinity', now() - interval '1 day', 'hold-' || i, 1, 60, 'held',
               now() - interval '1 minute', now() - interval '2 minutes'
        from generate_series(1, ${n}) i`.execute(db);
      if (process.env.BENCH_ANALYZE) await sql`analyze usage_reservations`.execute(db);
      const started = performance.now();
      await sql`select outcome from public.metering_reserve(${user}, ${agent}::uuid, 'jobs', 'the-reserve', 1, 60, now())`.execute(db);
      const ms = performance.now() - started;
      const { rows: counts } = await sql<{ settled: number; held: number }>`
        select count(*) filter (where status = 'expired')::int as settled, count(*) filter (where status = 'held')::int as held
        from usage_reservations where subscription_id = ${sub}`.execute(db);
      console.log(`${String(n).padStart(13)} | ${ms.toFixed(0).padStart(10)} | ${String(counts[0]!.settled).padStart(13)} | ${counts[0]!.held - 1}`);
    }
  } finally {
    await database.close();
    await server.stop();
  }
}

await main();
