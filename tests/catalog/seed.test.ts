import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedDemoCatalog } from '../../scripts/seed.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signIn } from '../support/users.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

describe('demo catalog seed (npm start in development)', () => {
  it('fills an empty database once with agents, content, tiers, quotas and reviews', async () => {
    expect(await seedDemoCatalog({ ...t.deps, config: { ...t.deps.config, isProduction: true } })).toEqual({ seeded: false });
    expect((await t.http.get('/agents')).body.data).toEqual([]);

    expect(await seedDemoCatalog(t.deps)).toEqual({ seeded: true });
    const list = await t.http.get('/agents');
    expect(list.body.data.map((a: any) => a.slug)).toEqual(['invoice-reader', 'meeting-notes', 'sales-scout', 'support-copilot']);
    const support = list.body.data.find((a: any) => a.slug === 'support-copilot');
    expect(support).toMatchObject({ reviewCount: 2, averageRating: 4.5, status: 'active' });

    const full = await t.http.get('/agents/by-slug/support-copilot');
    expect(full.body.data.capabilities).toHaveLength(3);
    expect(full.body.data.steps).toHaveLength(3);
    expect(full.body.data.changelog.map((e: any) => e.version)).toEqual(['1.1.0', '1.0.0']);
    const pricing = await t.http.get(`/agents/${support.id}/pricing`);
    expect(pricing.body.data.map((x: any) => x.name)).toEqual(['Free', 'Pro', 'Team', 'Enterprise']);
    const admin = await createAdmin(t);
    const all = await t.http.get(`/agents/${support.id}/pricing`, { cookie: admin.cookie });
    expect(all.body.data.map((x: any) => x.name)).toContain('Partner (custom)');
    const metrics = await t.http.get(`/agents/${support.id}/metric-definitions`);
    expect(metrics.body.data.map((m: any) => m.slug).sort()).toEqual(['drafts', 'seats']);
    const quotas = await t.http.get(`/agents/${support.id}/pricing/${pricing.body.data[0].id}/quotas`);
    expect(quotas.status).toBe(200);
    expect(quotas.body.data).toHaveLength(2);
    expect((await t.http.get('/agents?pricing=free')).body.data.map((a: any) => a.slug).sort()).toEqual([
      'invoice-reader',
      'meeting-notes',
      'support-copilot',
    ]);

    expect(await seedDemoCatalog(t.deps)).toEqual({ seeded: false });
    expect((await t.http.get('/agents')).body.data).toHaveLength(4);
    // Demo reviewers are real accounts, but nobody knows their passwords.
    await expect(signIn(t, { email: 'riley.reviewer@example.com', password: 'password123' })).rejects.toThrow();
  });
});
