import { CompiledQuery } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, type Db } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';
import { walkPages } from '../support/pages.ts';
import { createAdmin, type TestUser } from '../support/users.ts';

/**
 * "Keyset pagination: page N costs the same as page 1" (contract.md section 1), measured on the real lists:
 * thousands of rows per list, the lists walked over HTTP to a deep page, and the very SQL the app ran for page 1
 * and for page N (recorded on its way to the driver) run again under EXPLAIN ANALYZE. Page N must read no more
 * rows of the list's table than page 1, about one page of them (an offset would read N pages, a sort of the whole
 * table all of them), with no Sort node: the (created_at, id) index serves the order and the seek.
 */

interface Recorded {
  sql: string;
  parameters: readonly unknown[];
}

/** The app's Db, recording every SQL statement the app sends through it (the driver and app are unchanged). */
function recordingDb(db: Db, seen: Recorded[]): Db {
  const bind = <T extends object>(target: T, overrides: Record<PropertyKey, unknown>): T =>
    new Proxy(target, {
      get(object, prop) {
        if (prop in overrides) return overrides[prop];
        const value = Reflect.get(object, prop, object);
        return typeof value === 'function' ? value.bind(object) : value;
      },
    });
  const executor = db.getExecutor();
  const recordingExecutor = bind(executor, {
    executeQuery: (query: CompiledQuery, ...rest: unknown[]) => {
      seen.push({ sql: query.sql, parameters: query.parameters });
      return (executor.executeQuery as (...args: unknown[]) => unknown)(query, ...rest);
    },
  });
  return bind(db, { getExecutor: () => recordingExecutor });
}

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

let t: TestApp;
let admin: TestUser;
let database: TestDatabase;
const seen: Recorded[] = [];
const ROWS = 1500;
const LIMIT = 20;
const DEEP_PAGE = 20;

beforeAll(async () => {
  database = await createTestDatabase();
  const db = recordingDb(database.database.db, seen);
  t = await startTestApp({ testDatabase: { ...database, database: { ...database.database, db } } });
  admin = await createAdmin(t);
  // Rows one second apart, newest first by created_at, plus ties (every 10th row shares its neighbour's time).
  const at = (g: string) => sql.raw(`timestamptz '2026-01-01' + ((${g} / 10) * 10 + (${g} % 10 > 0)::int) * interval '1 second'`);
  // Tags an admin made on their own (createTag): listed though no agent carries them.
  await sql`insert into public.tags (slug, name, created_at, standalone) select 'tag-' || g, 'Tag ' || g, ${at('g')}, true from generate_series(1, ${ROWS}) g`.execute(database.database.db);
  await sql`insert into public.agents (slug, name, status, created_at)
            select 'agent-' || g, 'Agent ' || g, case when g % 7 = 0 then 'draft' else 'active' end, ${at('g')}
            from generate_series(1, ${ROWS}) g`.execute(database.database.db);
  await sql`insert into public.interactions (type, created_at)
            select case when g % 3 = 0 then 'install' else 'demo_request' end, ${at('g')} from generate_series(1, ${ROWS}) g`.execute(database.database.db);
  await sql`insert into "user" (id, name, email, "emailVerified", "createdAt", "updatedAt")
            select 'seed-' || g, 'User ' || g, 'seed-' || g || '@example.com', true, ${at('g')}, now() from generate_series(1, ${ROWS}) g`.execute(database.database.db);
  await sql`analyze`.execute(database.database.db);
}, 120_000);
afterAll(async () => {
  await t?.close();
  await database?.drop();
});

/** The list statement among those recorded while `run` ran: the one that orders by created_at and takes limit + 1. */
async function listStatement(table: string, run: () => Promise<unknown>): Promise<Recorded> {
  const from = seen.length;
  await run();
  const candidates = seen.slice(from).filter((q) => new RegExp(`from\\s+${table.replace(/[".]/g, '\\$&')}(?!\\w)`, 'i').test(q.sql) && /order by[^)]*created_?at"?\s+desc/i.test(q.sql));
  expect(candidates.length, `list statement on ${table}`).toBe(1);
  return candidates[0]!;
}

async function explain(statement: Recorded): Promise<PlanNode> {
  const result = await database.database.db.executeQuery(CompiledQuery.raw(`explain (analyze, format json) ${statement.sql}`, [...statement.parameters]));
  const cell = Object.values(result.rows[0] as Record<string, unknown>)[0];
  const doc = (typeof cell === 'string' ? JSON.parse(cell) : cell) as Array<{ Plan: PlanNode }>;
  return doc[0]!.Plan;
}

/** Rows of `table` the plan touched: returned by its scans plus those their filters threw away. */
function rowsRead(plan: PlanNode, table: string): number {
  return nodes(plan)
    .filter((n) => n['Relation Name'] === table)
    .reduce((sum, n) => sum + ((n['Actual Rows'] ?? 0) + (n['Rows Removed by Filter'] ?? 0)) * (n['Actual Loops'] ?? 1), 0);
}

describe.each([
  { list: 'GET /tags', path: '/tags', table: 'tags', from: 'public.tags', asAdmin: false },
  { list: 'GET /agents', path: '/agents', table: 'agents', from: 'public.agents', asAdmin: false },
  { list: 'GET /agents (admin)', path: '/agents', table: 'agents', from: 'public.agents', asAdmin: true },
  { list: 'GET /admin/interactions', path: '/admin/interactions', table: 'interactions', from: 'public.interactions', asAdmin: true },
  { list: 'GET /admin/interactions?type=install', path: '/admin/interactions?type=install', table: 'interactions', from: 'public.interactions', asAdmin: true },
  { list: 'GET /admin/users', path: '/admin/users', table: 'user', from: '"user"', asAdmin: true },
])('$list', ({ path, table, from, asAdmin }) => {
  it(`reads about one page of rows on page ${DEEP_PAGE} as on page 1: an index seek, no offset, no sort`, async () => {
    const cookie = asAdmin ? admin.cookie : undefined;
    const first = await listStatement(from, () => walkPages(t, path, { limit: LIMIT, pages: 1, ...(cookie ? { cookie } : {}) }));
    const walked = await walkPages(t, path, { limit: LIMIT, pages: DEEP_PAGE - 1, ...(cookie ? { cookie } : {}) });
    expect(walked.hasMore).toBe(true);
    const deepUrl = `${path}${path.includes('?') ? '&' : '?'}limit=${LIMIT}&cursor=${encodeURIComponent(walked.cursors.at(-1)!)}`;
    const deep = await listStatement(from, async () => {
      const res = await t.http.get(deepUrl, cookie ? { cookie } : {});
      expect(res.status).toBe(200);
      expect(res.body.data).toHaveLength(LIMIT);
    });
    const firstPlan = await explain(first);
    const deepPlan = await explain(deep);
    for (const plan of [firstPlan, deepPlan]) {
      // no sort of the list's rows (a sort inside a per-row subquery, e.g. an agent's tags, is not one)
      const sortsOfTheList = nodes(plan).filter((n) => n['Node Type'] === 'Sort' && nodes(n).some((d) => d['Relation Name'] === table));
      expect(sortsOfTheList, JSON.stringify(plan)).toEqual([]);
      expect(nodes(plan).some((n) => n['Relation Name'] === table && /Index/.test(n['Node Type']))).toBe(true);
    }
    // Visible rows only are counted for a page; hidden ones (drafts in the public list) are read and skipped.
    const onePage = (LIMIT + 1) * 2;
    expect(rowsRead(firstPlan, table)).toBeLessThanOrEqual(onePage);
    expect(rowsRead(deepPlan, table)).toBeLessThanOrEqual(onePage);
  });
});
