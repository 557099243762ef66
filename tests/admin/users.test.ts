import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { walkPages } from '../support/pages.ts';
import { NOW, seedScenario, type Scenario } from './scenario.ts';

/** GET /admin/users (list with subscription count and monthly spend) and GET /admin/users/{userId} (profile). */
let t: TestApp;
let admin: TestUser;
let s: Scenario;
beforeAll(async () => {
  t = await startTestApp({ now: NOW });
  admin = await createAdmin(t);
  s = await seedScenario(t);
});
afterAll(() => t.close());

interface ListedUser {
  id: string;
  email: string;
  name: string;
  subscriptionCount: number;
  monthlySpendCents: number;
}

async function allUsers(query = '', limit = 100): Promise<ListedUser[]> {
  return (await walkPages<ListedUser>(t, query ? `/admin/users?${query.replace(/^&/, '')}` : '/admin/users', { limit, cookie: admin.cookie, maxPages: 50 })).items;
}

describe('GET /admin/users', () => {
  it('lists every user with live subscription count and monthly spend (yearly / 12; free, canceled, incomplete excluded)', async () => {
    const users = await allUsers();
    const byId = new Map(users.map((u) => [u.id, u]));
    const summary = (key: keyof Scenario['users']) => {
      const u = byId.get(s.users[key].userId)!;
      return [u.subscriptionCount, u.monthlySpendCents];
    };
    expect(summary('u1')).toEqual([2, 2000]);
    expect(summary('u2')).toEqual([1, 1658]);
    expect(summary('u3')).toEqual([2, 3500]);
    expect(summary('u4')).toEqual([0, 0]);
    expect(summary('u5')).toEqual([2, 3500]);
    expect(summary('u6')).toEqual([2, 2000]);
    expect(byId.get(admin.userId)).toMatchObject({ role: 'platform_admin', subscriptionCount: 0, monthlySpendCents: 0 });
    expect(byId.get(s.users.u1.userId)).toMatchObject({ email: s.users.u1.email, name: 'Ada One', role: 'user', banned: false, banReason: null });
  });

  it('pages newest first with a cursor, each user exactly once', async () => {
    const all = await allUsers();
    const paged = await allUsers('', 2);
    expect(paged.map((u) => u.id)).toEqual(all.map((u) => u.id));
    expect(all.length).toBe(7);
    const created = all.map((u) => (u as unknown as { createdAt: string }).createdAt);
    expect([...created].sort().reverse()).toEqual(created);
  });

  it('searches email and name case-insensitively with q; pattern characters are literal', async () => {
    const byName = await allUsers('&q=ED%20fIVE');
    expect(byName.map((u) => u.id)).toEqual([s.users.u5.userId]);
    const byEmail = await allUsers(`&q=${encodeURIComponent(s.users.u2.email.slice(0, 12).toUpperCase())}`);
    expect(byEmail.map((u) => u.id)).toEqual([s.users.u2.userId]);
    expect(await allUsers('&q=%25')).toEqual([]);
    expect(await allUsers('&q=_')).toEqual([]);
  });

  it('refuses a bad limit, an empty q, and a cursor from another search with 400', async () => {
    for (const query of ['limit=0', 'limit=-1', 'limit=abc', 'q=', 'q=%20%20', 'q=a%00b', `q=${'x'.repeat(201)}`]) {
      const res = await t.http.get(`/admin/users?${query}`, { cookie: admin.cookie });
      expect(res.status, query).toBe(400);
      expect(res.body.error.code, query).toBe('VALIDATION_ERROR');
    }
    const first = await t.http.get('/admin/users?limit=1', { cookie: admin.cookie });
    const other = await t.http.get(`/admin/users?q=e&cursor=${encodeURIComponent(first.body.pagination.cursor)}`, { cookie: admin.cookie });
    expect(other.status).toBe(400);
    expect(other.body.error.code).toBe('INVALID_CURSOR');
  });

  it('is for platform admins only: anonymous 401, signed-in user 403', async () => {
    expect((await t.http.get('/admin/users')).status).toBe(401);
    const res = await t.http.get('/admin/users', { cookie: s.users.u1.cookie });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('FORBIDDEN');
  });
});

describe('GET /admin/users/{userId}', () => {
  it('shows base fields, ban state and reason, subscriptions with agent and tier, and organization memberships', async () => {
    const u2 = s.users.u2;
    const org = await t.http.post('/api/auth/organization/create', {
      cookie: u2.cookie,
      headers: { origin: t.baseUrl },
      json: { name: 'Two Corp', slug: `two-corp-${randomUUID().slice(0, 6)}` },
    });
    expect(org.status, org.text).toBe(200);
    const ban = await t.http.post(`/admin/users/${u2.userId}/ban`, { cookie: admin.cookie, json: { reason: 'chargebacks' } });
    expect(ban.status).toBe(200);

    const res = await t.http.get(`/admin/users/${u2.userId}`, { cookie: admin.cookie });
    expect(res.status, res.text).toBe(200);
    const p = res.body.data;
    expect(p).toMatchObject({
      id: u2.userId,
      email: u2.email,
      name: 'Bob Two',
      role: 'user',
      banned: true,
      banReason: 'chargebacks',
      banExpires: null,
      subscriptionCount: 1,
      monthlySpendCents: 1658,
    });
    expect(p.subscriptions.map((x: { id: string }) => x.id)).toEqual([s.subs.s2, s.subs.s0c]);
    expect(p.subscriptions[0]).toMatchObject({
      id: s.subs.s2,
      userId: u2.userId,
      agentId: s.alpha.id,
      tierId: s.tiers.alphaYearly.id,
      status: 'active',
      createdAt: '2026-09-15T10:00:00.000Z',
      agent: { id: s.alpha.id, slug: s.alpha.slug, name: 'Alpha', status: 'active' },
      tier: { id: s.tiers.alphaYearly.id, name: 'Pro yearly', priceCents: 19900, currency: 'usd', interval: 'year' },
    });
    expect(p.subscriptions[1]).toMatchObject({ status: 'canceled', agent: { id: s.beta.id }, tier: { id: s.tiers.betaPro.id, priceCents: 1500 } });
    expect(p.organizations).toEqual([
      { organizationId: org.body.id, name: 'Two Corp', slug: org.body.slug, role: 'owner', joinedAt: expect.any(String) },
    ]);
  });

  it('shows a user without subscriptions or organizations with empty lists', async () => {
    const res = await t.http.get(`/admin/users/${admin.userId}`, { cookie: admin.cookie });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ id: admin.userId, role: 'platform_admin', banned: false, subscriptions: [], organizations: [] });
  });

  it('answers 404 for an unknown user', async () => {
    const res = await t.http.get(`/admin/users/${randomUUID()}`, { cookie: admin.cookie });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('NOT_FOUND');
  });

  it('refuses a user id no user can have (a NUL character) with 400, not a database error', async () => {
    const res = await t.http.get('/admin/users/a%00b', { cookie: admin.cookie });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('VALIDATION_ERROR');
  });

  it('is for platform admins only: anonymous 401, the user themselves 403', async () => {
    const user = s.users.u1;
    expect((await t.http.get(`/admin/users/${user.userId}`)).status).toBe(401);
    const own = await t.http.get(`/admin/users/${user.userId}`, { cookie: user.cookie });
    expect(own.status).toBe(403);
    const other = await signUp(t);
    expect((await t.http.get(`/admin/users/${user.userId}`, { cookie: other.cookie })).status).toBe(403);
  });
});
