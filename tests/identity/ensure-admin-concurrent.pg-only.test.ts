import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { anotherInstance, createTestDatabase, type TestDatabase } from '../support/databases.ts';

/**
 * ADMIN_EMAIL / ADMIN_PASSWORD with several instances starting at once on one database (a deploy of replicas), each
 * with its own connections: every instance starts, and there is one admin account with one password.
 * (The embedded database belongs to one process, so this is PostgreSQL's alone.)
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

describe('admin account when instances start together', () => {
  it('three instances start; one account, one credential, one sign-up, and the password signs in', async () => {
    const env = { ADMIN_EMAIL: 'ops@market.example', ADMIN_PASSWORD: 'replica admin pw' };
    const databases = [anotherInstance(db), anotherInstance(db), anotherInstance(db)];
    const started = await Promise.allSettled(databases.map((testDatabase) => startTestApp({ testDatabase, env })));
    const apps = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    try {
      expect(started.filter((s) => s.status === 'rejected')).toEqual([]);
      const counts = await first<{ users: number; credentials: number; signups: number }>(
        db.database.db,
        sql`select (select count(*)::int from "user" where email = ${env.ADMIN_EMAIL}) as users,
                   (select count(*)::int from account a join "user" u on u.id = a."userId"
                     where u.email = ${env.ADMIN_EMAIL} and a."providerId" = 'credential') as credentials,
                   (select count(*)::int from interactions i join "user" u on u.id = i.user_id
                     where u.email = ${env.ADMIN_EMAIL} and i.type = 'user_signup') as signups`,
      );
      expect(counts).toEqual({ users: 1, credentials: 1, signups: 1 });
      for (const app of apps as TestApp[]) {
        const res = await app.http.post('/api/auth/sign-in/email', { json: { email: env.ADMIN_EMAIL, password: env.ADMIN_PASSWORD } });
        expect(res.status).toBe(200);
        expect(res.body.user.role).toBe('platform_admin');
      }
    } finally {
      await Promise.all(apps.map((app) => app.close()));
      await Promise.all(databases.map((d) => d.drop()));
    }
  });
});
