import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';
import { createAdmin, signIn as signInAs } from '../support/users.ts';

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
      // Someone demotes the account in the database (another admin exists: the last one cannot be demoted)...
      await createAdmin(first1);
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

  // Was: the ban was lifted only with a missing role, so an ADMIN_EMAIL admin another admin banned stayed banned.
  it('attack: an ADMIN_EMAIL admin banned by another admin signs in again after a restart (the ban is lifted and logged)', async () => {
    const env = { ADMIN_EMAIL: 'root-admin@market.example', ADMIN_PASSWORD: 'root admin password 1' };
    let t = await startTestApp({ testDatabase: db, env });
    try {
      const root = await signInAs(t, { email: env.ADMIN_EMAIL, password: env.ADMIN_PASSWORD });
      const other = await createAdmin(t);
      const ban = await t.http.post(`/admin/users/${root.userId}/ban`, {
        cookie: other.cookie,
        json: { reason: 'mistaken' },
        headers: { origin: t.baseUrl },
      });
      expect(ban.status, ban.text).toBe(200);
      expect((await signIn(t, env.ADMIN_EMAIL, env.ADMIN_PASSWORD)).status).toBe(403); // BANNED_USER
      // The other admin is gone too (demoted, or simply a leaver): the operator restarts with ADMIN_* set.
      await sql`update "user" set role = 'user' where id = ${other.userId}`.execute(t.db);
    } finally {
      await t.close();
    }
    t = await startTestApp({ testDatabase: db, env });
    try {
      const res = await signIn(t, env.ADMIN_EMAIL, env.ADMIN_PASSWORD);
      expect(res.status, res.text).toBe(200);
      expect(res.body.user).toMatchObject({ role: 'platform_admin', banned: false, banReason: null, banExpires: null });
      const root = await signInAs(t, { email: env.ADMIN_EMAIL, password: env.ADMIN_PASSWORD });
      expect((await t.http.get('/admin/users', { cookie: root.cookie })).status).toBe(200);
      const warned = t.logs.filter((l) => l.msg === 'ADMIN_EMAIL account was banned: ban lifted at start-up');
      expect(warned).toHaveLength(1);
      expect(warned[0]).toMatchObject({ level: 'warn', userId: root.userId });
      expect(JSON.stringify(t.logs)).not.toContain(env.ADMIN_PASSWORD);
      // A start with nothing to repair lifts nothing and warns of nothing.
      await t.close();
      t = await startTestApp({ testDatabase: db, env });
      expect(t.logs.filter((l) => l.msg === 'ADMIN_EMAIL account was banned: ban lifted at start-up')).toHaveLength(0);
    } finally {
      await t.close();
    }
  });
  it('a password the admin changed is kept, and they stay signed in, across restarts with the same ADMIN_PASSWORD; a new ADMIN_PASSWORD applies', async () => {
    // Every start set the password back to ADMIN_PASSWORD when it differed, which ends every session: an admin who
    // changed a leaked password got the leaked one back and was signed out at each restart, and on the edge at each
    // cold isolate.
    const env = { ADMIN_EMAIL: 'keeps-own@market.example', ADMIN_PASSWORD: 'operator password 1' };
    let t = await startTestApp({ testDatabase: db, env });
    let cookie: string;
    try {
      const admin = await signInAs(t, { email: env.ADMIN_EMAIL, password: env.ADMIN_PASSWORD });
      const changed = await t.http.post('/api/auth/change-password', {
        cookie: admin.cookie,
        headers: { origin: t.baseUrl },
        json: { currentPassword: env.ADMIN_PASSWORD, newPassword: 'my own password 2', revokeOtherSessions: true },
      });
      expect(changed.status, changed.text).toBe(200);
      cookie = (await signInAs(t, { email: env.ADMIN_EMAIL, password: 'my own password 2' })).cookie;
    } finally {
      await t.close();
    }
    for (let restart = 1; restart <= 2; restart++) {
      t = await startTestApp({ testDatabase: db, env });
      try {
        expect((await signIn(t, env.ADMIN_EMAIL, env.ADMIN_PASSWORD)).status, `restart ${restart}`).toBe(401);
        expect((await signIn(t, env.ADMIN_EMAIL, 'my own password 2')).status, `restart ${restart}`).toBe(200);
        expect((await t.http.get('/admin/users', { cookie })).status, `restart ${restart}: the session lives`).toBe(200);
      } finally {
        await t.close();
      }
    }
    t = await startTestApp({ testDatabase: db, env: { ...env, ADMIN_PASSWORD: 'operator password 3' } });
    try {
      expect((await signIn(t, env.ADMIN_EMAIL, 'my own password 2')).status).toBe(401);
      expect((await signIn(t, env.ADMIN_EMAIL, 'operator password 3')).status).toBe(200);
      expect((await t.http.get('/admin/users', { cookie })).status, 'a new ADMIN_PASSWORD takes the account back').toBe(401);
      const stored = await first<{ fingerprint: string }>(t.db, sql`select fingerprint from admin_password_applied a join "user" u on u.id = a.user_id where u.email = ${env.ADMIN_EMAIL}`);
      expect(stored!.fingerprint).toMatch(/^[0-9a-f]{64}$/);
      expect(stored!.fingerprint).not.toContain('operator');
    } finally {
      await t.close();
    }
  });
});
