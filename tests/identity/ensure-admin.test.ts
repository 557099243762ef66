import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';

/** ADMIN_EMAIL / ADMIN_PASSWORD: the account exists with role platform_admin after every start. */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

const signIn = (t: TestApp, email: string, password: string) => t.http.post('/api/auth/sign-in/email', { json: { email, password } });

describe('admin account at start', () => {
  it('creates the admin on first start, repairs role and password on later starts, never duplicates it', async () => {
    const first1 = await startTestApp({ testDatabase: db, env: { ADMIN_EMAIL: 'Boss@Market.example', ADMIN_PASSWORD: 'first admin pw' } });
    try {
      const res = await signIn(first1, 'boss@market.example', 'first admin pw');
      expect(res.status).toBe(200);
      expect(res.body.user.role).toBe('platform_admin');
      // Someone demotes the account in the database...
      await sql`update "user" set role = 'user' where email = 'boss@market.example'`.execute(first1.db);
    } finally {
      await first1.close();
    }
    // ...and the operator changes ADMIN_PASSWORD: the next start restores both.
    const second = await startTestApp({ testDatabase: db, env: { ADMIN_EMAIL: 'boss@market.example', ADMIN_PASSWORD: 'second admin pw' } });
    try {
      expect((await signIn(second, 'boss@market.example', 'first admin pw')).status).toBe(401);
      const res = await signIn(second, 'boss@market.example', 'second admin pw');
      expect(res.status).toBe(200);
      expect(res.body.user.role).toBe('platform_admin');
      const count = await first<{ n: number }>(second.db, sql`select count(*)::int as n from "user" where email = 'boss@market.example'`);
      expect(count!.n).toBe(1);
      const signups = await first<{ n: number }>(
        second.db,
        sql`select count(*)::int as n from interactions i join "user" u on u.id = i.user_id
             where u.email = 'boss@market.example' and i.type = 'user_signup'`,
      );
      expect(signups!.n).toBe(1);
    } finally {
      await second.close();
    }
  });
});
