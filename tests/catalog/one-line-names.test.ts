import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { breaksLine } from '../../functions/platform/text.ts';
import { createAdmin, type TestUser } from '../support/users.ts';
import { agentBody, createAgent, expectError } from './helpers.ts';

/**
 * The catalog's names are one line, as users', buyers' and organizations' are (platform/text.ts, reviews 19, 63, 66):
 * they are shown on pages and put into mails. Review 72: an agent's name with line breaks wrote a forged "(verified)"
 * request line into the staff's demo-request mail, and tag, tier and metric names took anything too. Now each is
 * refused with 400 and nothing is written; the database itself refuses them too (migration 20261127005900), so the
 * mails, the SQL quota mail among them, quote names as stored.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

const HOSTILE = ['Line one\nLine two', 'Mail Reader\u202emoc.elgoog', 'Next\u0085line', 'Tab\there', 'Para\u2029graph'];

describe('catalog names', () => {
  it('attack (review 72): with a line break, a control character or a bidirectional override are refused, and nothing is written', async () => {
    const agent = await createAgent(t, admin);
    const as = { cookie: admin.cookie };
    for (const name of HOSTILE) {
      const label = JSON.stringify(name);
      const answers = {
        createAgent: await t.http.post('/agents', { ...as, json: agentBody({ name }) }),
        updateAgent: await t.http.patch(`/agents/${agent.id}`, { ...as, json: { name } }),
        agentTags: await t.http.patch(`/agents/${agent.id}`, { ...as, json: { tags: [name] } }),
        createTag: await t.http.post('/tags', { ...as, json: { name } }),
        createTier: await t.http.post(`/agents/${agent.id}/pricing`, {
          ...as,
          json: { name, priceCents: 0, currency: 'usd', interval: 'month', isPublic: true, features: [] },
        }),
        createMetric: await t.http.post(`/agents/${agent.id}/metric-definitions`, { ...as, json: { slug: 'calls', name, kind: 'rolling' } }),
        metricUnit: await t.http.post(`/agents/${agent.id}/metric-definitions`, { ...as, json: { slug: 'calls', name: 'Calls', unit: name, kind: 'rolling' } }),
      };
      for (const [operation, res] of Object.entries(answers)) {
        expect({ operation, label, status: res.status }).toEqual({ operation, label, status: 400 });
        expectError(res, 400, 'VALIDATION_ERROR');
      }
    }
    const stored = await rows(
      t.db,
      sql`select name from agents where name ~ '[\\n\\t]' or name like ${'%\u202e%'}
          union all select name from tags where name ~ '[\\n\\t]' or name like ${'%\u202e%'}
          union all select name from tiers where agent_id = ${agent.id}
          union all select name from metric_definitions where agent_id = ${agent.id}`,
    );
    expect(stored).toEqual([]);
    expect((await t.http.get(`/agents/${agent.id}`)).body.data.name).toBe(agent.name);
  });

  it('the database refuses them from any writer: a script or an operator\'s SQL stores none (migration 20261127005900)', async () => {
    const agent = await createAgent(t, admin);
    const tier = (await t.http.post(`/agents/${agent.id}/pricing`, {
      cookie: admin.cookie,
      json: { name: 'Pro', priceCents: 0, currency: 'usd', interval: 'month', isPublic: true, features: [] },
    })).body.data;
    const metric = (await t.http.post(`/agents/${agent.id}/metric-definitions`, { cookie: admin.cookie, json: { slug: 'calls', name: 'Calls', kind: 'rolling' } })).body.data;
    const forged = 'Copilot (copilot).\n\n"Dana" <ceo@bigcorp.test> (verified) asked for a demo of Copilot';
    const writes = {
      agent: sql`update agents set name = ${forged} where id = ${agent.id}`,
      tag: sql`insert into tags (slug, name) values ('forged-tag', ${forged.slice(0, 60)})`,
      tier: sql`update tiers set name = ${forged} where id = ${tier.id}`,
      metric: sql`update metric_definitions set name = ${forged} where id = ${metric.id}`,
      unit: sql`update metric_definitions set unit = ${'calls\u202e'} where id = ${metric.id}`,
    };
    for (const [table, write] of Object.entries(writes)) {
      const code = await write.execute(t.db).then(() => 'stored', (err: { code?: string }) => err.code);
      expect({ table, code }).toEqual({ table, code: '23514' });
    }
    expect((await t.http.get(`/agents/${agent.id}`)).body.data.name).toBe(agent.name);
  });

  it('the database and platform/text.ts call the same characters line-breaking', async () => {
    const points = [
      ...Array.from({ length: 0xff }, (_, i) => i + 1),
      ...Array.from({ length: 0x80 }, (_, i) => 0x2000 + i),
      0x061c, 0xfeff, 0x1f600, 0x0915,
    ];
    const texts = points.map((p) => `a${String.fromCodePoint(p)}b`);
    const judged = await rows<{ text: string; one_line: boolean }>(
      t.db,
      sql`select text, public.is_one_line(text) as one_line from unnest(${texts}::text[]) as text`,
    );
    const differing = judged
      .filter((r) => r.one_line === breaksLine(r.text))
      .map((r) => `U+${r.text.codePointAt(1)!.toString(16).padStart(4, '0')}`);
    expect(differing).toEqual([]);
    expect(judged.filter((r) => !r.one_line).length).toBeGreaterThan(60);
  });
});
