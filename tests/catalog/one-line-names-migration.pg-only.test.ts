import { describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { loadMigrations, migrate } from '../../functions/platform/migrations.ts';
import { emptyDatabase } from '../support/databases.ts';
import { insertAgent } from '../support/fixtures.ts';

/**
 * Migration 20261127005900: names stored before the one-line rule (review 72) are made one line as platform/text.ts's
 * oneLine() makes them, since the database's quota mail quotes them as stored; a name left empty takes its slug, and
 * a tier name that would equal another of its agent's keeps its id's first eight characters. Checked on a database
 * migrated to just before it, holding such names.
 */
const VERSION = '20261127005900';

describe(`migration ${VERSION}: names stored before the one-line rule`, () => {
  it('become one line; a name left empty takes its slug, a tier name its agent already has a suffix; other names stay', async () => {
    const { database, drop } = await emptyDatabase();
    try {
      const migrations = await loadMigrations();
      await migrate(database, { migrations: migrations.filter((m) => m.version < VERSION) });
      const db = database.db;
      const agent = await insertAgent(db);
      const blank = await insertAgent(db);
      const kept = await insertAgent(db);
      await sql`update agents set name = ${'Copilot\n\n"Dana" <ceo@bigcorp.test>\u202e (verified)'} where id = ${agent.id}`.execute(db);
      await sql`update agents set name = ${'\n\t\u2028'} where id = ${blank.id}`.execute(db);
      await sql`insert into tiers (agent_id, name, price_cents) values
                  (${agent.id}, ${'Pro\n'}, 0), (${agent.id}, 'Pro', 0), (${agent.id}, ${'Team \u0085 plan'}, 0)`.execute(db);
      await sql`insert into metric_definitions (agent_id, slug, name, kind, unit) values
                  (${agent.id}, 'calls', ${'API\ncalls'}, 'rolling', ${'\u2066calls\u2069'}),
                  (${agent.id}, 'seats', ${'\r\n'}, 'fixed', ${'\n'})`.execute(db);
      await sql`insert into tags (slug, name) values ('forged', ${'Forged\ttag'})`.execute(db);
      // two tier names of one agent that flatten to nothing (JavaScript's trim() kept U+0085 and the isolates before
      // review 72): both would be 'Plan', and the agent's unique tier names aborted the migration (review 81)
      await sql`insert into tiers (agent_id, name, price_cents) values (${blank.id}, ${'\u0085'}, 0), (${blank.id}, ${'\u2066\u2069'}, 0)`.execute(db);

      await migrate(database);

      const agents = await rows<{ id: string; name: string }>(db, sql`select id, name from agents`);
      expect(agents.find((a) => a.id === agent.id)!.name).toBe('Copilot "Dana" <ceo@bigcorp.test> (verified)');
      expect(agents.find((a) => a.id === blank.id)!.name).toBe(blank.slug);
      expect(agents.find((a) => a.id === kept.id)!.name).toBe(kept.name);
      const tiers = await rows<{ id: string; name: string }>(db, sql`select id, name from tiers where agent_id = ${agent.id} order by name`);
      const suffixed = tiers.find((x) => x.name.startsWith('Pro ('))!;
      expect(tiers.map((x) => x.name)).toEqual(['Pro', `Pro (${suffixed.id.slice(0, 8)})`, 'Team plan']);
      const plans = await rows<{ id: string; name: string }>(db, sql`select id, name from tiers where agent_id = ${blank.id}`);
      expect(plans.map((x) => x.name).sort()).toEqual(plans.map((x) => `Plan (${x.id.slice(0, 8)})`).sort());
      expect(await rows(db, sql`select slug, name, unit from metric_definitions where agent_id = ${agent.id} order by slug`)).toEqual([
        { slug: 'calls', name: 'API calls', unit: 'calls' },
        { slug: 'seats', name: 'seats', unit: null },
      ]);
      expect(await rows(db, sql`select name from tags where slug = 'forged'`)).toEqual([{ name: 'Forged tag' }]);
    } finally {
      await drop();
    }
  });
});
