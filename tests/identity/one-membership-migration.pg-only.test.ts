import { describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { loadMigrations, migrate } from '../../functions/platform/migrations.ts';
import { emptyDatabase } from '../support/databases.ts';

/**
 * Migration 20261127004100 (review 24, finding 3) makes a membership unique per (organization, account) and a pending
 * invitation unique per (organization, address). Races before it left duplicates, which it merges first: of an
 * account's memberships the one with the highest role stays (its invitations with it), of an address's pending
 * invitations the newest. Checked on a database migrated to just before it, holding such rows.
 */
const VERSION = '20261127004100';


describe(`migration ${VERSION}: one membership per account, one pending invitation per address`, () => {
  it('merges the duplicates earlier races left: the highest role stays, the newest pending invitation stays', async () => {
    const { database, drop } = await emptyDatabase();
    try {
      const migrations = await loadMigrations();
      await migrate(database, { migrations: migrations.filter((m) => m.version < VERSION) });
      const db = database.db;
      for (const id of ['owner', 'alt', 'other']) {
        await sql`insert into "user" (id, name, email, "emailVerified") values (${id}, ${id}, ${`${id}@example.test`}, true)`.execute(db);
      }
      await sql`insert into organization (id, name, slug, "createdAt") values ('org', 'Acme', 'acme', now())`.execute(db);
      await sql`insert into member (id, "organizationId", "userId", role, "createdAt") values
                  ('owner-1', 'org', 'owner', 'owner', now() - interval '9 days'),
                  ('owner-2', 'org', 'owner', 'member', now() - interval '8 days'),
                  ('alt-1', 'org', 'alt', 'member', now() - interval '7 days'),
                  ('alt-2', 'org', 'alt', 'admin', now() - interval '6 days'),
                  ('alt-3', 'org', 'alt', 'admin', now() - interval '5 days'),
                  ('other-1', 'org', 'other', 'member', now())`.execute(db);
      await sql`insert into invitation (id, "organizationId", email, role, status, "expiresAt", "createdAt", "inviterId") values
                  ('sent-by-alt', 'org', 'friend@example.test', 'member', 'pending', now() + interval '1 day', now(), 'alt'),
                  ('older', 'org', 'twice@example.test', 'admin', 'pending', now() + interval '1 day', now() - interval '1 hour', 'owner'),
                  ('newer', 'org', 'Twice@example.test', 'admin', 'pending', now() + interval '1 day', now(), 'owner'),
                  ('done', 'org', 'twice@example.test', 'admin', 'accepted', now() + interval '1 day', now() - interval '2 hours', 'owner')`.execute(db);

      expect(await migrate(database)).toEqual(migrations.filter((m) => m.version >= VERSION).map((m) => m.version));

      const members = await rows<{ id: string; role: string }>(db, sql`select id, role from member order by id`);
      expect(members).toEqual([
        { id: 'alt-2', role: 'admin' },
        { id: 'other-1', role: 'member' },
        { id: 'owner-1', role: 'owner' },
      ]);
      const invitations = await rows<{ id: string; status: string }>(db, sql`select id, status from invitation order by id`);
      expect(invitations).toEqual([
        { id: 'done', status: 'accepted' },
        { id: 'newer', status: 'pending' },
        { id: 'older', status: 'canceled' },
        { id: 'sent-by-alt', status: 'pending' }, // alt is still a member: what it sent stands
      ]);
      // and the rules hold from now on
      await expect(sql`insert into member (id, "organizationId", "userId", role, "createdAt") values ('alt-4', 'org', 'alt', 'member', now())`.execute(db)).rejects.toMatchObject({ code: '23505' });
      // a member's departure still cancels what they sent (the trigger switched off for the merge is on again)
      await sql`delete from member where id = 'alt-2'`.execute(db);
      expect((await rows<{ status: string }>(db, sql`select status from invitation where id = 'sent-by-alt'`))[0]!.status).toBe('canceled');
    } finally {
      await drop();
    }
  }, 120_000);
});
