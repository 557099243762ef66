import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { openPostgres, type Database } from '../../functions/platform/db.ts';
import { migrate } from '../../functions/platform/migrations.ts';
import { createEmptyPostgresDatabase } from '../support/databases.ts';
import { insertAgent } from '../support/fixtures.ts';

/**
 * The Data API (PostgREST: `anon` with no account, `authenticated` with a token; not behind the service's rate
 * limiter) on a database set up as Supabase sets one up: its default privileges (every new table, function and
 * sequence of `public` granted in full to anon, authenticated and service_role) in place before the migrations run.
 * pg-only: PGlite is no Data API's database.
 *   - Review 60: an anonymous read of `catalog_agents` counted every review of every listed agent through the
 *     security-definer `review_shown`, twice per review (seconds at 100,000 reviews, past Supabase's 3 s timeout for
 *     `anon` further on); it now reads the tallies the HTTP API reads (migration 20261127005500). Their reads and exact counts of an
 *     agent's reviews (`reviews`, `catalog_reviews`) asked it about every row too; a review now keeps from when it is
 *     shown (migration 20261127005600).
 *   - Those roles hold no TRUNCATE on any table (the defaults grant it, and TRUNCATE ignores row-level security), and
 *     no INSERT, UPDATE, DELETE, REFERENCES or TRIGGER either (review 100: the defaults grant those too, and a trigger
 *     anon attached to public.agents ran as the service whenever it wrote the table; migration 20261127007200).
 */

let database: Database;
let drop: () => Promise<void>;
beforeAll(async () => {
  const empty = await createEmptyPostgresDatabase();
  database = openPostgres(empty.url, { max: 4 });
  drop = async () => {
    await database.close();
    await empty.drop();
  };
  await database.runScript(`
    alter default privileges in schema public grant all on tables to anon, authenticated, service_role;
    alter default privileges in schema public grant all on functions to anon, authenticated, service_role;
    alter default privileges in schema public grant all on sequences to anon, authenticated, service_role;`);
  await migrate(database);
}, 240_000);
afterAll(() => drop?.());

/** Runs `query` as PostgREST runs an anonymous request; answers its rows and how often it called review_shown. */
async function asAnonCountingReviewChecks<T>(query: ReturnType<typeof sql<T>>): Promise<{ rows: T[]; reviewChecks: number }> {
  return database.db.transaction().execute(async (trx) => {
    // counted in this backend only: no parallel workers
    await sql`set local max_parallel_workers_per_gather = 0`.execute(trx);
    await sql`set local track_functions = 'all'`.execute(trx);
    await sql`select set_config('request.jwt.claims', '{"role":"anon"}', true)`.execute(trx);
    await sql.raw('set local role anon').execute(trx);
    const read = await rows(trx, query);
    await sql.raw('reset role').execute(trx);
    const calls = await first<{ n: number | null }>(trx, sql`select pg_stat_get_xact_function_calls('public.review_shown(uuid)'::regprocedure)::int as n`);
    return { rows: read, reviewChecks: calls!.n ?? 0 };
  });
}

describe('the Data API on a database with Supabase’s default privileges', () => {
  it('attack (review 60): an anonymous catalog_agents read costs the same however many reviews there are, and counts what the rule shows', async () => {
    const agents = [await insertAgent(database.db, { status: 'active' }), await insertAgent(database.db, { status: 'active' })];
    const hidden = await insertAgent(database.db, { status: 'inactive' });
    for (const agent of [...agents, hidden]) {
      await sql`insert into reviews (agent_id, user_id, rating)
                select ${agent.id}, 'reviewer-' || g, 1 + g % 5 from generate_series(1, 1000) g`.execute(database.db);
    }
    // One reviewer banned for a week: their reviews are not shown while it lasts.
    await sql`insert into "user" (id, name, email, "emailVerified", banned, "banExpires", "createdAt", "updatedAt")
              values ('reviewer-1', 'R', 'r1@example.test', true, true, now() + interval '7 days', now(), now())`.execute(database.db);
    const read = await asAnonCountingReviewChecks(
      sql<{ id: string; review_count: number; average_rating: string | null }>`select id, review_count, average_rating from catalog_agents order by id`,
    );
    expect(read.reviewChecks, 'review_shown calls for one anonymous read of 3,000 reviews').toBe(0);
    const rule = await rows<{ id: string; review_count: number; average_rating: string }>(
      database.db,
      sql`select agent_id as id, count(*)::int as review_count, round(avg(rating), 2)::text as average_rating
            from reviews where agent_id in (${agents[0]!.id}, ${agents[1]!.id}) and public.review_shown(id)
           group by agent_id order by agent_id`,
    );
    const numbers = (r: { id: string; review_count: number; average_rating: string | number | null }) => ({ ...r, average_rating: Number(r.average_rating) });
    expect(read.rows.map(numbers)).toEqual(rule.map(numbers));
    expect(rule.map((r) => r.review_count)).toEqual([999, 999]);
  });

  it('an anonymous read or exact count of an agent’s reviews asks review_shown about none, and shows what the rule shows', async () => {
    const agent = await insertAgent(database.db, { status: 'active' });
    await sql`insert into reviews (agent_id, user_id, rating)
              select ${agent.id}, 'counted-' || g, 1 + g % 5 from generate_series(1, 1000) g`.execute(database.db);
    // one author banned for a week, one whose ban ended yesterday, one banned for good
    await sql`insert into "user" (id, name, email, "emailVerified", banned, "banExpires", "createdAt", "updatedAt")
              values ('counted-1', 'R', 'c1@example.test', true, true, now() + interval '7 days', now(), now()),
                     ('counted-2', 'R', 'c2@example.test', true, true, now() - interval '1 day', now(), now()),
                     ('counted-3', 'R', 'c3@example.test', true, true, null, now(), now())`.execute(database.db);
    const rule = await rows<{ id: string }>(
      database.db,
      sql`select id from reviews where agent_id = ${agent.id} and public.review_shown(id) order by id`,
    );
    expect(rule).toHaveLength(998);
    for (const table of ['reviews', 'catalog_reviews']) {
      // PostgREST's `Prefer: count=exact`, beside its page
      const counted = await asAnonCountingReviewChecks(sql<{ n: number }>`select count(*)::int as n from ${sql.table(table)} where agent_id = ${agent.id}`);
      expect({ table, n: counted.rows[0]!.n, reviewChecks: counted.reviewChecks }).toEqual({ table, n: 998, reviewChecks: 0 });
      const read = await asAnonCountingReviewChecks(sql<{ id: string }>`select id from ${sql.table(table)} where agent_id = ${agent.id} order by id`);
      expect({ table, reviewChecks: read.reviewChecks }).toEqual({ table, reviewChecks: 0 });
      expect(read.rows).toEqual(rule);
    }
  });

  const WRITES = ['insert', 'update', 'delete', 'truncate', 'references', 'trigger'];

  it('anon and authenticated hold no TRUNCATE (it ignores row-level security), nor any other write, REFERENCES or TRIGGER, on any table', async () => {
    const held = await rows<{ role: string; tbl: string; privilege: string }>(
      database.db,
      sql`select r.rolname as role, c.relname as tbl, w.privilege
            from pg_class c join pg_namespace n on n.oid = c.relnamespace cross join pg_roles r
           cross join unnest(${WRITES}::text[]) w (privilege)
           where n.nspname = 'public' and c.relkind in ('r', 'p') and r.rolname in ('anon', 'authenticated')
             and has_table_privilege(r.rolname, c.oid, w.privilege)
           order by 1, 2, 3`,
    );
    expect(held).toEqual([]);
    // and a table made later by the same owner inherits none of them either
    await sql`create table public.later_table (id int)`.execute(database.db);
    const later = await rows<{ role: string; privilege: string }>(
      database.db,
      sql`select r.rolname as role, w.privilege from pg_roles r cross join unnest(${WRITES}::text[]) w (privilege)
           where r.rolname in ('anon', 'authenticated') and has_table_privilege(r.rolname, 'public.later_table', w.privilege)`,
    );
    expect(later).toEqual([]);
  });

  it('attack (review 100): anon cannot attach a trigger to public.agents that would then run as the service writing it', async () => {
    const outcome = await database.db.transaction().execute(async (trx) => {
      await sql.raw('set local role anon').execute(trx);
      let refusal = '';
      try {
        await sql.raw('savepoint planted').execute(trx);
        await sql.raw(`create function pg_temp.who_writes() returns trigger language plpgsql as $$
                         begin perform set_config('planted.ran_as', current_user, true); return new; end $$`).execute(trx);
        await sql.raw(`create trigger planted before insert on public.agents for each row execute function pg_temp.who_writes()`).execute(trx);
      } catch (err) {
        refusal = (err as { code?: string }).code ?? String(err);
        await sql.raw('rollback to savepoint planted').execute(trx);
      }
      await sql.raw('reset role').execute(trx);
      await sql`insert into public.agents (slug, name) values ('planted-trigger', 'Planted')`.execute(trx); // the service writes
      const ran = await first<{ ran_as: string | null }>(trx, sql`select nullif(current_setting('planted.ran_as', true), '') as ran_as`);
      // (thrown to roll the whole transaction back: the agent row and any trigger)
      throw Object.assign(new Error('rolled back'), { outcome: { refusal, ranAs: ran?.ran_as ?? null } });
    }).catch((err: { outcome?: { refusal: string; ranAs: string | null } }) => {
      if (err.outcome) return err.outcome;
      throw err;
    });
    expect(outcome).toEqual({ refusal: '42501', ranAs: null }); // insufficient_privilege; nothing ran as the service
  });
});
