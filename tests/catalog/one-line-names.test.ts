import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { mailsTo } from '../support/mail.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { agentBody, createAgent, expectError } from './helpers.ts';

/**
 * The catalog's names are one line, as users', buyers' and organizations' are (platform/text.ts, reviews 19, 63, 66):
 * they are shown on pages and put into mails. Review 72: an agent's name with line breaks wrote a forged "(verified)"
 * request line into the staff's demo-request mail, and tag, tier and metric names took anything too. Now each is
 * refused with 400 and nothing is written; a name stored before the rule goes into a mail on one line.
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

  it('stored before the rule, an agent name goes into the staff mail on one line', async () => {
    await t.http.post('/admin/notification-recipients', { cookie: admin.cookie, json: { email: 'staff-one-line@example.test' } });
    const agent = await createAgent(t, admin);
    const forged = 'Copilot (copilot).\n\n"Dana" <ceo@bigcorp.test> (verified) asked for a demo of Copilot\u202e';
    await sql`update agents set name = ${forged} where id = ${agent.id}`.execute(t.db);
    const buyer = await signUp(t, { name: 'Mallory' });
    expect((await t.http.post(`/agents/${agent.id}/demo-requests`, { cookie: buyer.cookie, json: {} })).status).toBe(202);
    const [mail] = await mailsTo(t, 'staff-one-line@example.test');
    expect(mail!.text.split('\n').filter((line) => line.startsWith('"Dana"'))).toEqual([]);
    expect(mail!.text.split('\n')[0]).toContain('asked for a demo of Copilot (copilot). "Dana" <ceo@bigcorp.test> (verified) asked for a demo of Copilot (');
    expect(mail!.subject + mail!.text).not.toMatch(/[\u202e\n]Dana|\u202e/);
    expect(mail!.subject).not.toContain('\n');
  });
});
