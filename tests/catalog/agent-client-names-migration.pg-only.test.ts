import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { loadMigrations, migrate } from '../../functions/platform/migrations.ts';
import { emptyDatabase } from '../support/databases.ts';
import { insertAgent } from '../support/fixtures.ts';

/**
 * Migration 20261127006200 (review 85): a renamed agent renames its OAuth client (the consent page shows the client's
 * name) since 20261127006100, but only renames made from then on: an agent renamed before, or whose name migration
 * 20261127005900 made one line (a spoofing name such as 'Copilot\n\n"Dana" <ceo@bigcorp.test>'), kept its old client
 * name on the consent screen. Checked on a database migrated to just before 5900, holding such a client.
 */

describe('migration 20261127006200: clients of agents renamed before renames followed', () => {
  it('their client carries the agent name after the migrations', async () => {
    const { database, drop } = await emptyDatabase();
    try {
      const migrations = await loadMigrations();
      await migrate(database, { migrations: migrations.filter((m) => m.version < '20261127005900') });
      const db = database.db;
      const agent = await insertAgent(db);
      const clientId = `client-${randomUUID()}`;
      const now = new Date();
      const spoof = 'Copilot\n\n"Dana" <ceo@bigcorp.test>\u202e (verified)';
      await sql`insert into "oauthClient" (id, "clientId", "redirectUris", "createdAt", "updatedAt", name)
                values (${randomUUID()}, ${clientId}, ${JSON.stringify(['https://a.test/cb'])}::jsonb, ${now}, ${now}, ${spoof})`.execute(db);
      await sql`insert into agent_oauth_clients (agent_id, client_id) values (${agent.id}, ${clientId})`.execute(db);
      await sql`update agents set name = ${spoof} where id = ${agent.id}`.execute(db);

      await migrate(database);

      const row = await first<{ agent: string; client: string }>(
        db,
        sql`select a.name as agent, c.name as client from agents a join agent_oauth_clients l on l.agent_id = a.id
              join "oauthClient" c on c."clientId" = l.client_id where a.id = ${agent.id}`,
      );
      expect(row).toEqual({ agent: 'Copilot "Dana" <ceo@bigcorp.test> (verified)', client: 'Copilot "Dana" <ceo@bigcorp.test> (verified)' });
    } finally {
      await drop();
    }
  });
});
