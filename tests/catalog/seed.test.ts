import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { first, sql } from '../../functions/platform/db.ts';
import { withDemoAdmin } from '../../scripts/demo-admin.ts';
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
    // Demo reviewers are real accounts with a password (a credential account holding a hash), but a random one
    // nobody knows: a sign-in is refused as a wrong password (401 INVALID_EMAIL_OR_PASSWORD), not for another reason.
    for (const email of ['riley.reviewer@example.com']) {
      const credential = await first<{ hash: string | null }>(
        t.db,
        sql`select a.password as hash from account a join "user" u on u.id = a."userId" where u.email = ${email} and a."providerId" = 'credential'`,
      );
      expect(credential?.hash).toEqual(expect.any(String));
      for (const guess of ['password123', 'riley.reviewer@example.com', 'demo', '']) {
        const res = await t.http.post('/api/auth/sign-in/email', { json: { email, password: guess } });
        expect([400, 401], `${guess}: ${res.text}`).toContain(res.status);
        if (guess) expect(res.body.code, guess).toBe('INVALID_EMAIL_OR_PASSWORD');
      }
    }
  });
});

describe('demo admin (npm start with nothing set)', () => {
  it('signs in with the generated password it prints, keeps it across restarts, and refuses a wrong one as a wrong password', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'mkt-demo-admin-'));
    try {
      const first1 = withDemoAdmin({ NODE_ENV: 'development', DATA_DIR: dataDir });
      expect(first1.generated).toMatchObject({ email: 'admin@example.com', created: true });
      expect(statSync(first1.generated!.file).mode & 0o777).toBe(0o600);
      const again = withDemoAdmin({ NODE_ENV: 'development', DATA_DIR: dataDir });
      expect(again.generated).toMatchObject({ password: first1.generated!.password, created: false });
      expect(withDemoAdmin({ NODE_ENV: 'production', DATA_DIR: dataDir }).generated).toBeUndefined();

      const app = await startTestApp({ env: { ADMIN_EMAIL: first1.env.ADMIN_EMAIL, ADMIN_PASSWORD: first1.env.ADMIN_PASSWORD } });
      try {
        const admin = await signIn(app, { email: first1.generated!.email, password: first1.generated!.password });
        const me = await app.http.get('/me', { cookie: admin.cookie });
        expect(me.body.data).toMatchObject({ email: 'admin@example.com', role: 'platform_admin' });
        const wrong = await app.http.post('/api/auth/sign-in/email', { json: { email: 'admin@example.com', password: `${first1.generated!.password}x` } });
        expect(wrong.status).toBe(401);
        expect(wrong.body.code).toBe('INVALID_EMAIL_OR_PASSWORD');
      } finally {
        await app.close();
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
