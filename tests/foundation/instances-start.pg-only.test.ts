import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { anotherInstance, createTestDatabase, eventually, statementsWaitingForLock, type TestDatabase } from '../support/databases.ts';

/**
 * Several instances of the service starting at once on one database (a deploy of replicas), each with its own
 * connections: every instance starts, and what start-up makes exists once. (The embedded database belongs to one
 * process, so this is PostgreSQL's alone.) Migrations: migrations-concurrent.pg-only.test.ts; the demo seed:
 * tests/catalog/seed-concurrent.pg-only.test.ts.
 */
let db: TestDatabase;
beforeEach(async () => {
  db = await createTestDatabase();
});
afterEach(() => db.drop());

/** Starts three instances at once; every one must start. */
async function startThree(env: Record<string, string> = {}): Promise<{ apps: TestApp[]; stop(): Promise<void> }> {
  const databases = [anotherInstance(db), anotherInstance(db), anotherInstance(db)];
  const started = await Promise.allSettled(databases.map((testDatabase) => startTestApp({ testDatabase, env })));
  const apps = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const stop = async () => {
    await Promise.all(apps.map((app) => app.close()));
    await Promise.all(databases.map((d) => d.drop()));
  };
  const failed = started.filter((s) => s.status === 'rejected');
  if (failed.length > 0) {
    await stop();
    expect(failed).toEqual([]);
  }
  return { apps, stop };
}

describe('admin account when instances start together', () => {
  it('three instances start; one account, one credential, one sign-up, and the password signs in', async () => {
    const env = { ADMIN_EMAIL: 'ops@market.example', ADMIN_PASSWORD: 'replica admin pw' };
    const { apps, stop } = await startThree(env);
    try {
      const counts = await first<{ users: number; credentials: number; signups: number }>(
        db.database.db,
        sql`select (select count(*)::int from "user" where email = ${env.ADMIN_EMAIL}) as users,
                   (select count(*)::int from account a join "user" u on u.id = a."userId"
                     where u.email = ${env.ADMIN_EMAIL} and a."providerId" = 'credential') as credentials,
                   (select count(*)::int from interactions i join "user" u on u.id = i.user_id
                     where u.email = ${env.ADMIN_EMAIL} and i.type = 'user_signup') as signups`,
      );
      expect(counts).toEqual({ users: 1, credentials: 1, signups: 1 });
      for (const app of apps) {
        const res = await app.http.post('/api/auth/sign-in/email', { json: { email: env.ADMIN_EMAIL, password: env.ADMIN_PASSWORD } });
        expect(res.status).toBe(200);
        expect(res.body.user.role).toBe('platform_admin');
      }
    } finally {
      await stop();
    }
  });
});

describe('the signing key when instances start together', () => {
  it('one key is made, and every instance lists that one key from its first request', async () => {
    await sql`delete from jwks`.execute(db.database.db);
    // Force the race: the key table takes no writes until all three instances wait, so each has looked for a key
    // before any key exists. Without the turn each then writes its own (three keys); with it, one waits for the table
    // with the turn, and two wait for the turn (inTurn asks for it again and again rather than wait in one statement,
    // which statement_timeout would bound) and then find the first one's key.
    let starting: ReturnType<typeof startThree> | undefined;
    await db.database.db.transaction().execute(async (trx) => {
      await sql`lock table jwks in exclusive mode`.execute(trx); // reads go on; inserts wait
      starting = startThree();
      starting.catch(() => {}); // awaited below
      await eventually('one instance waits for the table, two for the turn', async () => {
        // the three turns' transactions: the one taken (its work waits for the table) and the two asking again
        const turns = await first<{ n: number }>(
          db.database.db,
          sql`select count(*)::int as n from pg_stat_activity
               where datname = current_database() and pid <> pg_backend_pid() and query ilike '%pg_try_advisory_xact_lock%'`,
        );
        return (await statementsWaitingForLock(db.database.db, '%')) === 1 && turns!.n === 3;
      });
    }); // commits: the inserts go on
    const { apps, stop } = await starting!;
    try {
      const sets = await Promise.all(apps.map((app) => app.http.get('/api/auth/jwks')));
      const keys = await first<{ n: number }>(db.database.db, sql`select count(*)::int as n from jwks`);
      expect(keys!.n).toBe(1);
      const kids = sets.map((res) => res.body.keys.map((k: { kid: string }) => k.kid));
      expect(kids[0]).toHaveLength(1);
      expect(kids).toEqual([kids[0], kids[0], kids[0]]);
    } finally {
      await stop();
    }
  });
});
