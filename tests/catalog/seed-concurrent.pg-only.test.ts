import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { seedDemoCatalog } from '../../scripts/seed.ts';
import { startTestApp } from '../support/app.ts';
import { anotherInstance, createTestDatabase, type TestDatabase } from '../support/databases.ts';

/**
 * The demo seed (`npm start` in development) when several instances start together on one empty database, each with
 * its own connections: one seeds, the others find the catalog seeded, none fails. (PostgreSQL only: the embedded
 * database belongs to one process.)
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

describe('demo seed when instances start together', () => {
  it('three instances at once: one seeds, the others find it seeded, one copy of everything', async () => {
    const databases = [anotherInstance(db), anotherInstance(db), anotherInstance(db)];
    const apps = await Promise.all(databases.map((testDatabase) => startTestApp({ testDatabase })));
    try {
      const seeded = await Promise.allSettled(apps.map((app) => seedDemoCatalog(app.deps)));
      expect(seeded.filter((s) => s.status === 'rejected')).toEqual([]);
      const outcomes = seeded.map((s) => (s.status === 'fulfilled' ? s.value.seeded : undefined));
      expect(outcomes.filter((x) => x === true)).toHaveLength(1);
      const counts = await first<{ agents: number; reviewers: number }>(
        db.database.db,
        sql`select (select count(*)::int from public.agents) as agents,
                   (select count(*)::int from "user" where email in ('riley.reviewer@example.com', 'sam.sampler@example.com')) as reviewers`,
      );
      expect(counts).toEqual({ agents: 4, reviewers: 2 });
      const list = await apps[2]!.http.get('/agents');
      expect(list.body.data.map((a: { slug: string }) => a.slug)).toEqual(['invoice-reader', 'meeting-notes', 'sales-scout', 'support-copilot']);
    } finally {
      await Promise.all(apps.map((app) => app.close()));
      await Promise.all(databases.map((d) => d.drop()));
    }
  }, 60_000);
});
