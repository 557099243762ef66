import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertAgent, insertTier } from '../support/fixtures.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { meter, reqId, subscribe } from './support.ts';

/** Metric definitions and tier quotas over HTTP. */

let t: TestApp;
let admin: TestUser;
let user: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  user = await signUp(t);
});
afterAll(() => t.close());

const metricsPath = (agentId: string, metricId?: string) => `/agents/${agentId}/metric-definitions${metricId ? `/${metricId}` : ''}`;
const quotasPath = (agentId: string, tierId: string, metricId?: string) =>
  `/agents/${agentId}/pricing/${tierId}/quotas${metricId ? `/${metricId}` : ''}`;

async function createMetric(agentId: string, body: Record<string, unknown>) {
  const res = await t.http.post(metricsPath(agentId), { cookie: admin.cookie, json: body });
  expect(res.status, res.text).toBe(201);
  return res.body.data as { id: string; slug: string; kind: string };
}

describe('metric definitions', () => {
  it('creates, lists, reads and updates a metric definition', async () => {
    const agent = await insertAgent(t.db);
    const created = await t.http.post(metricsPath(agent.id), {
      cookie: admin.cookie,
      json: { slug: 'api-calls', name: 'API calls', kind: 'rolling', unit: 'call' },
    });
    expect(created.status).toBe(201);
    expect(created.body.data).toEqual({
      id: expect.any(String),
      agentId: agent.id,
      slug: 'api-calls',
      name: 'API calls',
      kind: 'rolling',
      unit: 'call',
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
    });
    const second = await createMetric(agent.id, { slug: 'sites', name: 'Sites', kind: 'fixed' });
    const list = await t.http.get(metricsPath(agent.id));
    expect(list.status).toBe(200);
    expect(list.body.data.map((m: { slug: string }) => m.slug).sort()).toEqual(['api-calls', 'sites']);
    expect((await t.http.get(metricsPath(agent.id, second.id))).body.data).toMatchObject({ slug: 'sites', kind: 'fixed', unit: null });

    const renamed = await t.http.patch(metricsPath(agent.id, second.id), {
      cookie: admin.cookie,
      json: { name: 'Websites', unit: 'site', slug: 'sites', kind: 'fixed' },
    });
    expect(renamed.status).toBe(200);
    expect(renamed.body.data).toMatchObject({ id: second.id, name: 'Websites', unit: 'site', slug: 'sites', kind: 'fixed' });
    const cleared = await t.http.patch(metricsPath(agent.id, second.id), { cookie: admin.cookie, json: { unit: null } });
    expect(cleared.body.data).toMatchObject({ name: 'Websites', unit: null });
  });

  it('refuses changing slug or kind with 422 IMMUTABLE_FIELD and changes nothing', async () => {
    const agent = await insertAgent(t.db);
    const metric = await createMetric(agent.id, { slug: 'calls', name: 'Calls', kind: 'rolling' });
    for (const body of [{ slug: 'other' }, { kind: 'fixed' }, { name: 'New name', kind: 'fixed' }]) {
      const res = await t.http.patch(metricsPath(agent.id, metric.id), { cookie: admin.cookie, json: body });
      expect(res.status).toBe(422);
      expect(res.body.error.code).toBe('IMMUTABLE_FIELD');
    }
    expect((await t.http.get(metricsPath(agent.id, metric.id))).body.data).toMatchObject({ slug: 'calls', kind: 'rolling', name: 'Calls' });
  });

  it('answers 409 for a duplicate slug on the agent, allows the same slug on another agent', async () => {
    const agent = await insertAgent(t.db);
    const other = await insertAgent(t.db);
    await createMetric(agent.id, { slug: 'calls', name: 'Calls', kind: 'rolling' });
    const dup = await t.http.post(metricsPath(agent.id), { cookie: admin.cookie, json: { slug: 'calls', name: 'Again', kind: 'fixed' } });
    expect(dup.status).toBe(409);
    expect(dup.body.error.code).toBe('CONFLICT');
    await createMetric(other.id, { slug: 'calls', name: 'Calls', kind: 'rolling' });
  });

  it('validates input (400) and answers 404 for unknown agents and metrics', async () => {
    const agent = await insertAgent(t.db);
    for (const body of [{}, { slug: 'Bad Slug', name: 'x', kind: 'fixed' }, { slug: 'ok', name: 'x', kind: 'monthly' }, { slug: 'ok', name: '', kind: 'fixed' }]) {
      const res = await t.http.post(metricsPath(agent.id), { cookie: admin.cookie, json: body });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe('VALIDATION_ERROR');
    }
    const missing = '00000000-0000-4000-8000-000000000000';
    expect((await t.http.post(metricsPath(missing), { cookie: admin.cookie, json: { slug: 'ok', name: 'x', kind: 'fixed' } })).status).toBe(404);
    expect((await t.http.get(metricsPath(missing))).status).toBe(404);
    expect((await t.http.get(metricsPath(agent.id, missing))).status).toBe(404);
    expect((await t.http.patch(metricsPath(agent.id, missing), { cookie: admin.cookie, json: { name: 'x' } })).status).toBe(404);
    expect((await t.http.delete(metricsPath(agent.id, missing), { cookie: admin.cookie })).status).toBe(404);
    expect((await t.http.get(metricsPath(agent.id, 'nope'))).status).toBe(400);
    // a metric is addressed through its own agent only
    const other = await insertAgent(t.db);
    const metric = await createMetric(other.id, { slug: 'x', name: 'x', kind: 'fixed' });
    expect((await t.http.get(metricsPath(agent.id, metric.id))).status).toBe(404);
  });

  it('deletes an unused metric with its quota rows; 422 METRIC_IN_USE once usage, addons or ledger rows refer to it', async () => {
    const agent = await insertAgent(t.db);
    const tier = await insertTier(t.db, agent.id);
    const unused = await createMetric(agent.id, { slug: 'unused', name: 'Unused', kind: 'rolling' });
    expect((await t.http.put(quotasPath(agent.id, tier.id, unused.id), { cookie: admin.cookie, json: { quotaLimit: 5 } })).status).toBe(201);
    const del = await t.http.delete(metricsPath(agent.id, unused.id), { cookie: admin.cookie });
    expect(del.status).toBe(200);
    expect(del.body.data).toEqual({ id: unused.id });
    expect((await t.http.get(metricsPath(agent.id, unused.id))).status).toBe(404);
    expect((await t.http.get(quotasPath(agent.id, tier.id))).body.data).toEqual([]);

    const used = await createMetric(agent.id, { slug: 'used', name: 'Used', kind: 'rolling' });
    await t.http.put(quotasPath(agent.id, tier.id, used.id), { cookie: admin.cookie, json: { quotaLimit: 5 } });
    await subscribe(t, user.userId, tier.id);
    expect((await meter(t, user, agent.id, 'used', 'increment', { clientReqId: reqId() })).status).toBe(200);
    const refused = await t.http.delete(metricsPath(agent.id, used.id), { cookie: admin.cookie });
    expect(refused.status).toBe(422);
    expect(refused.body.error.code).toBe('METRIC_IN_USE');
    expect((await t.http.get(metricsPath(agent.id, used.id))).status).toBe(200);

    // an addon alone (no usage yet) also keeps a metric
    const addonOnly = await createMetric(agent.id, { slug: 'addon-only', name: 'Addon only', kind: 'fixed' });
    const sub = (await sql<{ id: string }>`select id from subscriptions where user_id = ${user.userId} and agent_id = ${agent.id}`.execute(t.db)).rows[0]!;
    expect(
      (await t.http.post(`/admin/subscriptions/${sub.id}/addons`, { cookie: admin.cookie, json: { metricSlug: 'addon-only', amount: 1, duration: 'permanent' } }))
        .status,
    ).toBe(201);
    expect((await t.http.delete(metricsPath(agent.id, addonOnly.id), { cookie: admin.cookie })).status).toBe(422);

    // ledger rows alone (no counter, no addon) keep a metric too. Setting its quota on a tier with a live
    // subscription writes that subscription's ledger (quota_changed); the API writes a counter with it, so the
    // counter is removed here to leave the history as the only reference.
    const ledgerOnly = await createMetric(agent.id, { slug: 'ledger-only', name: 'Ledger only', kind: 'fixed' });
    expect((await t.http.put(quotasPath(agent.id, tier.id, ledgerOnly.id), { cookie: admin.cookie, json: { quotaLimit: 3 } })).status).toBe(201);
    await sql`delete from public.usage_counters where metric_id = ${ledgerOnly.id}`.execute(t.db);
    const refs = async (table: 'usage_counters' | 'usage_addons' | 'quota_ledger') =>
      (await sql<{ n: number }>`select count(*)::int as n from ${sql.table(`public.${table}`)} where metric_id = ${ledgerOnly.id}`.execute(t.db)).rows[0]!.n;
    expect({ counters: await refs('usage_counters'), addons: await refs('usage_addons'), ledger: await refs('quota_ledger') }).toEqual({
      counters: 0,
      addons: 0,
      ledger: expect.any(Number),
    });
    expect(await refs('quota_ledger')).toBeGreaterThan(0);
    const kept = await t.http.delete(metricsPath(agent.id, ledgerOnly.id), { cookie: admin.cookie });
    expect(kept.status).toBe(422);
    expect(kept.body.error.code).toBe('METRIC_IN_USE');
  });

  it('hides the metrics and quotas of draft and inactive agents from everyone but admins (404)', async () => {
    for (const status of ['draft', 'inactive'] as const) {
      const agent = await insertAgent(t.db, { status });
      const tier = await insertTier(t.db, agent.id);
      const metric = await createMetric(agent.id, { slug: 'calls', name: 'Calls', kind: 'rolling' });
      for (const path of [metricsPath(agent.id), metricsPath(agent.id, metric.id), quotasPath(agent.id, tier.id)]) {
        expect((await t.http.get(path)).status, `${status} ${path}`).toBe(404);
        expect((await t.http.get(path, { cookie: user.cookie })).status, `${status} ${path}`).toBe(404);
        expect((await t.http.get(path, { cookie: admin.cookie })).status, `${status} ${path}`).toBe(200);
      }
    }
    const comingSoon = await insertAgent(t.db, { status: 'coming_soon' });
    await createMetric(comingSoon.id, { slug: 'calls', name: 'Calls', kind: 'rolling' });
    expect((await t.http.get(metricsPath(comingSoon.id))).body.data).toHaveLength(1);
  });

  it('is public to read and admin-only to write (401 anonymous, 403 for a user)', async () => {
    const agent = await insertAgent(t.db);
    const metric = await createMetric(agent.id, { slug: 'calls', name: 'Calls', kind: 'rolling' });
    expect((await t.http.get(metricsPath(agent.id))).status).toBe(200);
    expect((await t.http.get(metricsPath(agent.id, metric.id))).status).toBe(200);
    const body = { slug: 'new', name: 'New', kind: 'fixed' };
    expect((await t.http.post(metricsPath(agent.id), { json: body })).status).toBe(401);
    const forbidden = await t.http.post(metricsPath(agent.id), { cookie: user.cookie, json: body });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.error.code).toBe('FORBIDDEN');
    expect((await t.http.patch(metricsPath(agent.id, metric.id), { json: { name: 'x' } })).status).toBe(401);
    expect((await t.http.patch(metricsPath(agent.id, metric.id), { cookie: user.cookie, json: { name: 'x' } })).status).toBe(403);
    expect((await t.http.delete(metricsPath(agent.id, metric.id))).status).toBe(401);
    expect((await t.http.delete(metricsPath(agent.id, metric.id), { cookie: user.cookie })).status).toBe(403);
    expect((await t.http.get(metricsPath(agent.id))).body.data).toHaveLength(1);
    expect((await t.http.get(metricsPath(agent.id, metric.id))).body.data.name).toBe('Calls');
  });
});

describe('tier quotas', () => {
  it('upserts (201 then 200), lists and removes quotas; null = unlimited', async () => {
    const agent = await insertAgent(t.db);
    const tier = await insertTier(t.db, agent.id);
    const calls = await createMetric(agent.id, { slug: 'calls', name: 'Calls', kind: 'rolling' });
    const sites = await createMetric(agent.id, { slug: 'sites', name: 'Sites', kind: 'fixed' });
    const created = await t.http.put(quotasPath(agent.id, tier.id, calls.id), { cookie: admin.cookie, json: { quotaLimit: 100 } });
    expect(created.status).toBe(201);
    expect(created.body.data).toEqual({ tierId: tier.id, metricId: calls.id, metric: 'calls', quotaLimit: 100, updatedAt: expect.any(String) });
    const updated = await t.http.put(quotasPath(agent.id, tier.id, calls.id), { cookie: admin.cookie, json: { quotaLimit: null } });
    expect(updated.status).toBe(200);
    expect(updated.body.data.quotaLimit).toBeNull();
    await t.http.put(quotasPath(agent.id, tier.id, sites.id), { cookie: admin.cookie, json: { quotaLimit: 0 } });
    const list = await t.http.get(quotasPath(agent.id, tier.id));
    expect(list.status).toBe(200);
    expect(list.body.data.map((q: { metric: string; quotaLimit: number | null }) => [q.metric, q.quotaLimit])).toEqual([
      ['calls', null],
      ['sites', 0],
    ]);
    const removed = await t.http.delete(quotasPath(agent.id, tier.id, sites.id), { cookie: admin.cookie });
    expect(removed.status).toBe(200);
    expect(removed.body.data).toEqual({ id: sites.id });
    expect((await t.http.get(quotasPath(agent.id, tier.id))).body.data).toHaveLength(1);
    expect((await t.http.delete(quotasPath(agent.id, tier.id, sites.id), { cookie: admin.cookie })).status).toBe(404);
  });

  it('applies a quota change to live subscriptions at once and writes it to their ledgers', async () => {
    const agent = await insertAgent(t.db);
    const tier = await insertTier(t.db, agent.id);
    const calls = await createMetric(agent.id, { slug: 'calls', name: 'Calls', kind: 'rolling' });
    const u = await signUp(t);
    const sub = await subscribe(t, u.userId, tier.id);
    const inc = () => meter(t, u, agent.id, 'calls', 'increment', { clientReqId: reqId() });
    expect((await inc()).status).toBe(429); // no quota row: deny
    await t.http.put(quotasPath(agent.id, tier.id, calls.id), { cookie: admin.cookie, json: { quotaLimit: 1 } });
    expect((await inc()).status).toBe(200);
    expect((await inc()).status).toBe(429);
    await t.http.put(quotasPath(agent.id, tier.id, calls.id), { cookie: admin.cookie, json: { quotaLimit: null } });
    expect((await inc()).status).toBe(200);
    await t.http.delete(quotasPath(agent.id, tier.id, calls.id), { cookie: admin.cookie });
    expect((await inc()).status).toBe(429);

    const ledger = await t.http.get(`/admin/subscriptions/${sub.id}/ledger`, { cookie: admin.cookie });
    const quotaEvents = ledger.body.data.filter((e: { event: string }) => e.event === 'quota_changed');
    expect(quotaEvents.map((e: { amount: number | null; limit: number | null; details: Record<string, unknown> }) => [e.amount, e.limit, e.details])).toEqual([
      [null, 0, { tierId: tier.id, removed: true, previous: { exists: true, quotaLimit: null } }],
      [null, null, { tierId: tier.id, quotaLimit: null, previous: { exists: true, quotaLimit: 1 } }],
      [1, 1, { tierId: tier.id, quotaLimit: 1, previous: { exists: false } }],
    ]);
    expect(quotaEvents[0].actorUserId).toBe(admin.userId);
  });

  it('validates input and answers 404 for a tier or metric of another agent', async () => {
    const agent = await insertAgent(t.db);
    const tier = await insertTier(t.db, agent.id);
    const metric = await createMetric(agent.id, { slug: 'calls', name: 'Calls', kind: 'rolling' });
    for (const body of [{}, { quotaLimit: -1 }, { quotaLimit: 1.5 }, { quotaLimit: '5' }]) {
      const res = await t.http.put(quotasPath(agent.id, tier.id, metric.id), { cookie: admin.cookie, json: body });
      expect(res.status, JSON.stringify(body)).toBe(400);
    }
    const other = await insertAgent(t.db);
    const otherTier = await insertTier(t.db, other.id);
    const otherMetric = await createMetric(other.id, { slug: 'calls', name: 'Calls', kind: 'rolling' });
    expect((await t.http.put(quotasPath(agent.id, otherTier.id, metric.id), { cookie: admin.cookie, json: { quotaLimit: 1 } })).status).toBe(404);
    expect((await t.http.put(quotasPath(agent.id, tier.id, otherMetric.id), { cookie: admin.cookie, json: { quotaLimit: 1 } })).status).toBe(404);
    expect((await t.http.get(quotasPath(agent.id, otherTier.id))).status).toBe(404);
    expect((await t.http.get(quotasPath(agent.id, tier.id))).body.data).toEqual([]);
  });

  it('shows a hidden tier quotas to admins only; writes are admin-only (401 / 403)', async () => {
    const agent = await insertAgent(t.db);
    const hidden = await insertTier(t.db, agent.id, { isPublic: false });
    const metric = await createMetric(agent.id, { slug: 'calls', name: 'Calls', kind: 'rolling' });
    expect((await t.http.put(quotasPath(agent.id, hidden.id, metric.id), { json: { quotaLimit: 1 } })).status).toBe(401);
    expect((await t.http.put(quotasPath(agent.id, hidden.id, metric.id), { cookie: user.cookie, json: { quotaLimit: 1 } })).status).toBe(403);
    expect((await t.http.put(quotasPath(agent.id, hidden.id, metric.id), { cookie: admin.cookie, json: { quotaLimit: 1 } })).status).toBe(201);
    expect((await t.http.delete(quotasPath(agent.id, hidden.id, metric.id))).status).toBe(401);
    expect((await t.http.delete(quotasPath(agent.id, hidden.id, metric.id), { cookie: user.cookie })).status).toBe(403);
    expect((await t.http.get(quotasPath(agent.id, hidden.id))).status).toBe(404);
    expect((await t.http.get(quotasPath(agent.id, hidden.id), { cookie: user.cookie })).status).toBe(404);
    const asAdmin = await t.http.get(quotasPath(agent.id, hidden.id), { cookie: admin.cookie });
    expect(asAdmin.status).toBe(200);
    expect(asAdmin.body.data).toHaveLength(1);
  });
});
