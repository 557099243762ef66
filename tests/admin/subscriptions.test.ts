import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, type TestUser } from '../support/users.ts';
import { walkPages } from '../support/pages.ts';
import { NOW, seedScenario, type Scenario } from './scenario.ts';

/** GET /admin/subscriptions: every subscription as the subscription DTO, newest first, with filters. */
let t: TestApp;
let admin: TestUser;
let s: Scenario;
beforeAll(async () => {
  t = await startTestApp({ now: NOW });
  admin = await createAdmin(t);
  s = await seedScenario(t);
});
afterAll(() => t.close());

async function walk(query: string, limit = 100): Promise<Array<Record<string, unknown>>> {
  return (await walkPages(t, query ? `/admin/subscriptions?${query.replace(/^&/, '')}` : '/admin/subscriptions', { limit, cookie: admin.cookie, maxPages: 50 })).items;
}
const ids = (list: Array<Record<string, unknown>>) => list.map((x) => x.id);

describe('GET /admin/subscriptions', () => {
  it('lists every subscription newest first as the subscription DTO', async () => {
    const all = await walk('');
    expect(ids(all)).toEqual(['s3b', 's3', 's5', 's4', 's7', 's6', 's2', 's1', 's8', 's0c', 's0'].map((k) => s.subs[k]));
    expect(all[1]).toEqual({
      id: s.subs.s3,
      userId: s.users.u3.userId,
      agentId: s.alpha.id,
      tierId: s.tiers.alphaPro.id,
      status: 'active',
      currentPeriodStart: '2026-11-01T12:00:00.000Z',
      currentPeriodEnd: '2026-12-01T12:00:00.000Z',
      cancelAtPeriodEnd: false,
      pendingTierId: null,
      pendingChangeKind: null,
      createdAt: '2026-11-01T12:00:00.000Z',
    });
  });

  it('pages with a cursor: the same rows in the same order at any page size', async () => {
    expect(ids(await walk('', 3))).toEqual(ids(await walk('')));
    expect(ids(await walk(`&agentId=${s.alpha.id}`, 2))).toEqual(ids(await walk(`&agentId=${s.alpha.id}`)));
  });

  it('filters by user, agent and status, alone and combined', async () => {
    expect(ids(await walk(`&userId=${s.users.u5.userId}`))).toEqual([s.subs.s5, s.subs.s7]);
    expect(ids(await walk(`&agentId=${s.beta.id}`))).toEqual(['s3b', 's7', 's6', 's1', 's0c'].map((k) => s.subs[k]));
    expect(ids(await walk('&status=canceled'))).toEqual([s.subs.s4, s.subs.s0c]);
    expect(ids(await walk('&status=past_due'))).toEqual([s.subs.s5]);
    expect(ids(await walk(`&agentId=${s.beta.id}&status=active`))).toEqual(['s3b', 's7', 's1'].map((k) => s.subs[k]));
    expect(ids(await walk(`&userId=${s.users.u3.userId}&agentId=${s.beta.id}&status=active`))).toEqual([s.subs.s3b]);
    expect(await walk(`&userId=${randomUUID()}`)).toEqual([]);
  });

  it('refuses a bad status, agentId or limit with 400 VALIDATION_ERROR, and a cursor of another filter with INVALID_CURSOR', async () => {
    for (const query of ['status=paused', 'agentId=xyz', 'limit=0', 'limit=1.5', 'userId=a%00b', 'userId=']) {
      const res = await t.http.get(`/admin/subscriptions?${query}`, { cookie: admin.cookie });
      expect(res.status, query).toBe(400);
      expect(res.body.error.code, query).toBe('VALIDATION_ERROR');
    }
    const page = await t.http.get('/admin/subscriptions?limit=1&status=active', { cookie: admin.cookie });
    const replay = await t.http.get(`/admin/subscriptions?status=canceled&cursor=${encodeURIComponent(page.body.pagination.cursor)}`, {
      cookie: admin.cookie,
    });
    expect(replay.status).toBe(400);
    expect(replay.body.error.code).toBe('INVALID_CURSOR');
  });

  it('clamps limit to 100', async () => {
    const res = await t.http.get('/admin/subscriptions?limit=500', { cookie: admin.cookie });
    expect(res.status).toBe(200);
    expect(res.body.pagination.limit).toBe(100);
  });

  it('is for platform admins only: anonymous 401, signed-in user 403', async () => {
    const anonymous = await t.http.get('/admin/subscriptions');
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.error.code).toBe('UNAUTHORIZED');
    const user = await t.http.get(`/admin/subscriptions?userId=${s.users.u1.userId}`, { cookie: s.users.u1.cookie });
    expect(user.status).toBe(403);
    expect(user.body.error.code).toBe('FORBIDDEN');
  });
});
