import { describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { loadMigrations, migrate } from '../../functions/platform/migrations.ts';
import { emptyDatabase } from '../support/databases.ts';
import { insertAgent } from '../support/fixtures.ts';

/**
 * Migration 20261127005800 (review 71): a removal takes the user's proved address from every waitlist join in the
 * feed, also one another signed-in account made. Removals made before it left that address in such joins, with their
 * entry gone (the entry of a proved address goes with its owner); the migration takes it from them, and from nothing
 * else. Checked on a database migrated to just before it, where such a removal was made.
 */
const VERSION = '20261127005800';

describe(`migration ${VERSION}: the addresses earlier removals left in waitlist joins`, () => {
  it('go from the joins whose entry the removal took; every other join keeps its address', async () => {
    const { database, drop } = await emptyDatabase();
    try {
      const migrations = await loadMigrations();
      await migrate(database, { migrations: migrations.filter((m) => m.version < VERSION) });
      const db = database.db;
      const agent = await insertAgent(db, { status: 'coming_soon' });
      await sql`insert into "user" (id, name, email, "emailVerified") values
                  ('owner', 'O', 'owner@example.test', true), ('other', 'X', 'other@example.test', true)`.execute(db);
      // `other` joins with the owner's address and with a friend's; someone signed out joins with a third
      const join = async (userId: string | null, email: string) => {
        await sql`insert into waitlist_entries (agent_id, email, user_id) values (${agent.id}, ${email}, ${userId})`.execute(db);
        await sql`insert into interactions (type, user_id, agent_id, metadata)
                  values ('waitlist_signup', ${userId}, ${agent.id}, jsonb_build_object('email', ${email}::text))`.execute(db);
      };
      await join('other', 'owner@example.test');
      await join('other', 'friend@example.test');
      await join(null, 'stranger@example.test');
      // the owner's removal, as it ran then: the entry goes, the join by `other` keeps the address
      await sql`delete from "user" where id = 'owner'`.execute(db);
      const feed = () => rows<{ email: string | null }>(db, sql`select metadata ->> 'email' as email from interactions where agent_id = ${agent.id} order by 1`);
      expect(await feed()).toEqual([{ email: 'friend@example.test' }, { email: 'owner@example.test' }, { email: 'stranger@example.test' }]);

      expect(await migrate(database)).toEqual(migrations.filter((m) => m.version >= VERSION).map((m) => m.version));

      expect(await feed()).toEqual([{ email: 'friend@example.test' }, { email: 'stranger@example.test' }, { email: null }]);
      expect(await rows(db, sql`select user_id from interactions where agent_id = ${agent.id} and not metadata ? 'email'`)).toEqual([{ user_id: 'other' }]);
    } finally {
      await drop();
    }
  });
});
