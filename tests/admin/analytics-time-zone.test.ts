import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { anotherInstance, createTestDatabase, testTier, type TestDatabase } from '../support/databases.ts';
import { createAdmin, type TestUser } from '../support/users.ts';
import { FROM, NOW, TO, seedScenario, type Scenario } from './scenario.ts';

/**
 * Review 98: the funnel's "used" window is [to - 30 days, to] in UTC (docs/admin.md), but admin_analytics_funnel
 * computed `p_to - interval '30 days'` on a timestamptz, which PostgreSQL does in the session's TimeZone. On a server
 * whose TimeZone is not UTC (initdb takes the host's zone), a window whose last 30 days cross a daylight-saving change
 * moved by an hour. The shared scenario's window (to = 2026-11-01T12:00Z) crosses the end of CEST on 2026-10-25: s7's
 * increment 1 ms before to - 30 days counted as used in Europe/Berlin. Two guards: the function computes the window on
 * UTC wall time (migration 20261127006900), and the service's own connections work in UTC (platform/db.ts).
 */
let t: TestApp;
let admin: TestUser;
let s: Scenario;
let base: TestDatabase;
let instance: TestDatabase | undefined;
beforeAll(async () => {
  base = await createTestDatabase();
  await sql`do $$ begin execute format('alter database %I set timezone to %L', current_database(), 'Europe/Berlin'); end $$`.execute(base.database.db);
  if (testTier() === 'postgres') {
    instance = anotherInstance(base); // new connections, on a database whose TimeZone is Europe/Berlin
    t = await startTestApp({ now: NOW, testDatabase: instance });
  } else {
    await sql`set timezone to 'Europe/Berlin'`.execute(base.database.db); // the one embedded session, set by hand
    t = await startTestApp({ now: NOW, testDatabase: base });
  }
  admin = await createAdmin(t);
  s = await seedScenario(t);
});
afterAll(async () => {
  await t.close();
  await instance?.drop();
  await base.drop();
});

describe('analytics do not depend on the database session time zone', () => {
  it('counts "used" over [to - 30 days, to] in UTC whatever the server TimeZone', async () => {
    const res = await t.http.get(`/admin/analytics?from=${encodeURIComponent(FROM)}&to=${encodeURIComponent(TO)}`, { cookie: admin.cookie });
    expect(res.status).toBe(200);
    // docs/admin.md and tests/admin/scenario.ts: used 2 (s1 s5); s7's increment is 1 ms before to - 30 days.
    expect(res.body.data.funnel).toEqual({ purchased: 6, activated: 5, used: 2 });
    const beta = res.body.data.perAgent.find((a: { agentId: string }) => a.agentId === s.beta.id);
    expect(beta).toMatchObject({ purchased: 2, activated: 2, used: 1 });
  });

  it('the service works in UTC on a database whose TimeZone is Europe/Berlin', async () => {
    const tz = await sql<{ tz: string }>`select current_setting('TimeZone') as tz`.execute(t.db);
    // (the embedded database's one session was set to Europe/Berlin by hand, after the service started it in UTC)
    expect(tz.rows[0]!.tz).toBe(testTier() === 'postgres' ? 'UTC' : 'Europe/Berlin');
  });

  it("the funnel holds on a connection in Europe/Berlin (an operator's psql, the Data API)", async () => {
    const funnelUsedInBerlin = async (): Promise<{ tz: string; used: number }> => {
      if (testTier() !== 'postgres') {
        const row = await sql<{ tz: string; used: number }>`
          select current_setting('TimeZone') as tz, (select sum(used)::int from public.admin_analytics_funnel(${FROM}, ${TO}, null)) as used`.execute(base.database.db);
        return row.rows[0]!;
      }
      const operator = postgres(base.url!, { max: 1, onnotice: () => {} });
      try {
        const [row] = await operator<{ tz: string; used: number }[]>`
          select current_setting('TimeZone') as tz, (select sum(used)::int from public.admin_analytics_funnel(${FROM}, ${TO}, null)) as used`;
        return row!;
      } finally {
        await operator.end();
      }
    };
    expect(await funnelUsedInBerlin()).toEqual({ tz: 'Europe/Berlin', used: 2 });
  });
});
