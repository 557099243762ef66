import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { walkPages } from '../support/pages.ts';
import { meteredAgent, reqId, subscribe, meter } from './support.ts';

/** Admin metering of a subscription over HTTP: addons, the quota ledger, usage of every metric. */

let t: TestApp;
let admin: TestUser;
let user: TestUser;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-01-31T10:00:00.000Z' });
  admin = await createAdmin(t);
  user = await signUp(t);
});
afterAll(() => t.close());

const addonsPath = (subscriptionId: string) => `/admin/subscriptions/${subscriptionId}/addons`;
const grant = (subscriptionId: string, body: Record<string, unknown>) => t.http.post(addonsPath(subscriptionId), { cookie: admin.cookie, json: body });
const revoke = (subscriptionId: string, addonId: string) =>
  t.http.post(`${addonsPath(subscriptionId)}/${addonId}/revoke`, { cookie: admin.cookie });

async function setup(metrics: Parameters<typeof meteredAgent>[1]) {
  const u = await signUp(t);
  const a = await meteredAgent(t.db, metrics);
  const sub = await subscribe(t, u.userId, a.tierId);
  const inc = (slug: string, amount = 1) =>
    meter(t, u, a.agentId, slug, 'increment', { clientReqId: reqId(), amount });
  return { u, a, sub, inc };
}

describe('addons', () => {
  it('grants a permanent addon that raises the limit, lists it, and revokes it idempotently', async () => {
    const { sub, inc } = await setup([{ slug: 'calls', kind: 'rolling', quota: 2 }]);
    await inc('calls', 2);
    expect((await inc('calls')).status).toBe(429);

    const granted = await grant(sub.id, { metricSlug: 'calls', amount: 3, duration: 'permanent', note: 'goodwill' });
    expect(granted.status).toBe(201);
    expect(granted.body.data).toEqual({
      id: expect.any(String),
      subscriptionId: sub.id,
      metricId: expect.any(String),
      metric: 'calls',
      amount: 3,
      duration: 'permanent',
      periodStart: null,
      note: 'goodwill',
      status: 'active',
      inEffect: true,
      grantedBy: admin.userId,
      revokedAt: null,
      revokedBy: null,
      createdAt: '2026-01-31T10:00:00.000Z',
    });
    const addonId = granted.body.data.id;
    const ok = await inc('calls', 3);
    expect(ok.status).toBe(200);
    expect(ok.body.data).toMatchObject({ used: 5, limit: 5, remaining: 0 });

    const revoked = await revoke(sub.id, addonId);
    expect(revoked.status).toBe(200);
    expect(revoked.body.data).toMatchObject({ id: addonId, status: 'revoked', inEffect: false, revokedBy: admin.userId, revokedAt: '2026-01-31T10:00:00.000Z' });
    t.clock.advance(60_000);
    const again = await revoke(sub.id, addonId);
    expect(again.status).toBe(200);
    expect(again.body.data).toEqual(revoked.body.data);
    t.clock.set('2026-01-31T10:00:00.000Z');

    // used stays above the lowered limit (nothing is clawed back), new increments are refused
    const denied = await inc('calls');
    expect(denied.status).toBe(429);
    expect(denied.body.error.details).toMatchObject({ used: 5, limit: 2 });
    // contract.md: remaining = limit - used - reserved, so 3 over the lowered limit reads -3
    expect(denied.headers.get('x-quota-remaining')).toBe('-3');
    const list = await t.http.get(addonsPath(sub.id), { cookie: admin.cookie });
    expect(list.status).toBe(200);
    expect(list.body.data).toEqual([revoked.body.data]);
  });

  it('counts a one_cycle addon in the billing period it was granted in only', async () => {
    const { sub, inc } = await setup([{ slug: 'calls', kind: 'rolling', quota: 1 }]);
    const granted = await grant(sub.id, { metricSlug: 'calls', amount: 2, duration: 'one_cycle' });
    expect(granted.status).toBe(201);
    expect(granted.body.data).toMatchObject({ duration: 'one_cycle', periodStart: '2026-01-31T10:00:00.000Z', inEffect: true });
    expect((await inc('calls', 3)).body.data).toMatchObject({ used: 3, limit: 3 });

    t.clock.set('2026-02-28T10:00:00.000Z'); // next period: the addon expired, the counter starts at zero
    try {
      const next = await inc('calls');
      expect(next.body.data).toMatchObject({ used: 1, limit: 1, periodStart: '2026-02-28T10:00:00.000Z' });
      expect((await inc('calls')).status).toBe(429);
      const list = await t.http.get(addonsPath(sub.id), { cookie: admin.cookie });
      expect(list.body.data[0]).toMatchObject({ status: 'active', inEffect: false });
      const usage = await t.http.get(`/admin/subscriptions/${sub.id}/usage`, { cookie: admin.cookie });
      expect(usage.body.data).toEqual([
        { metric: 'calls', kind: 'rolling', used: 1, reserved: 0, limit: 1, remaining: 0, periodStart: '2026-02-28T10:00:00.000Z', periodEnd: '2026-03-31T10:00:00.000Z' },
      ]);
    } finally {
      t.clock.set('2026-01-31T10:00:00.000Z');
    }
  });

  it('refuses one_cycle on a fixed metric (422 ONE_CYCLE_NOT_ALLOWED), unknown metrics and subscriptions (404), canceled subscriptions (422)', async () => {
    const { sub } = await setup([{ slug: 'sites', kind: 'fixed', quota: 1 }]);
    const res = await grant(sub.id, { metricSlug: 'sites', amount: 1, duration: 'one_cycle' });
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe('ONE_CYCLE_NOT_ALLOWED');
    expect((await grant(sub.id, { metricSlug: 'nope', amount: 1, duration: 'permanent' })).status).toBe(404);
    const missing = '00000000-0000-4000-8000-000000000000';
    expect((await grant(missing, { metricSlug: 'sites', amount: 1, duration: 'permanent' })).status).toBe(404);
    expect((await t.http.get(addonsPath(missing), { cookie: admin.cookie })).status).toBe(404);
    expect((await revoke(sub.id, missing)).status).toBe(404);
    for (const body of [{ metricSlug: 'sites', amount: 0, duration: 'permanent' }, { metricSlug: 'sites', amount: 1, duration: 'forever' }, { amount: 1, duration: 'permanent' }]) {
      expect((await grant(sub.id, body)).status, JSON.stringify(body)).toBe(400);
    }
    expect((await t.http.get(addonsPath(sub.id), { cookie: admin.cookie })).body.data).toEqual([]);
    await sql`update subscriptions set status = 'canceled' where id = ${sub.id}`.execute(t.db);
    const canceled = await grant(sub.id, { metricSlug: 'sites', amount: 1, duration: 'permanent' });
    expect(canceled.status).toBe(422);
    expect(canceled.body.error.code).toBe('INVALID_STATE');
  });

  it("does not revoke an addon through another subscription's path", async () => {
    const first = await setup([{ slug: 'calls', kind: 'rolling', quota: 1 }]);
    const second = await setup([{ slug: 'calls', kind: 'rolling', quota: 1 }]);
    const granted = await grant(first.sub.id, { metricSlug: 'calls', amount: 1, duration: 'permanent' });
    expect((await revoke(second.sub.id, granted.body.data.id)).status).toBe(404);
    expect((await t.http.get(addonsPath(first.sub.id), { cookie: admin.cookie })).body.data[0].status).toBe('active');
  });
});

describe('quota ledger', () => {
  it('lists every event newest first, paginated, with the counter and limit after each', async () => {
    const { sub, inc, u, a } = await setup([
      { slug: 'calls', kind: 'rolling', quota: 2 },
      { slug: 'sites', kind: 'fixed', quota: 5 },
    ]);
    const key = reqId();
    await meter(t, u, a.agentId, 'calls', 'increment', { clientReqId: key, amount: 2 });
    await inc('calls'); // denied
    const granted = await grant(sub.id, { metricSlug: 'calls', amount: 1, duration: 'permanent' });
    await revoke(sub.id, granted.body.data.id);
    await inc('sites', 3);
    await meter(t, u, a.agentId, 'sites', 'decrement', { amount: 1 });

    const { items: all } = await walkPages<Record<string, unknown>>(t, `/admin/subscriptions/${sub.id}/ledger`, { limit: 2, cookie: admin.cookie, maxPages: 10 });
    expect(all.map((e) => [e.event, e.metric, e.delta, e.used, e.limit])).toEqual([
      ['decrement', 'sites', -1, 2, 5],
      ['increment', 'sites', 3, 3, 5],
      ['addon_revoked', 'calls', 0, 2, 2],
      ['addon_granted', 'calls', 0, 2, 3],
      ['increment_denied', 'calls', 0, 2, 2],
      ['increment', 'calls', 2, 2, 2],
    ]);
    expect(all[5]).toMatchObject({ clientReqId: key, amount: 2, periodStart: '2026-01-31T10:00:00.000Z', periodEnd: '2026-02-28T10:00:00.000Z' });
    expect(all[2]).toMatchObject({ addonId: granted.body.data.id, actorUserId: admin.userId, amount: 1 });
  });

  it('rejects a tampered cursor or one from another subscription (400 INVALID_CURSOR)', async () => {
    const first = await setup([{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    const second = await setup([{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    await first.inc('calls');
    await first.inc('calls');
    const page = await t.http.get(`/admin/subscriptions/${first.sub.id}/ledger?limit=1`, { cookie: admin.cookie });
    const cursor = page.body.pagination.cursor as string;
    const elsewhere = await t.http.get(`/admin/subscriptions/${second.sub.id}/ledger?cursor=${cursor}`, { cookie: admin.cookie });
    expect(elsewhere.status).toBe(400);
    expect(elsewhere.body.error.code).toBe('INVALID_CURSOR');
    const tampered = await t.http.get(`/admin/subscriptions/${first.sub.id}/ledger?cursor=${cursor.slice(0, -2)}xx`, { cookie: admin.cookie });
    expect(tampered.status).toBe(400);
    expect((await t.http.get(`/admin/subscriptions/${first.sub.id}/ledger?limit=0`, { cookie: admin.cookie })).status).toBe(400);
    expect((await t.http.get(`/admin/subscriptions/00000000-0000-4000-8000-000000000000/ledger`, { cookie: admin.cookie })).status).toBe(404);
  });
});

describe('subscription usage (admin)', () => {
  it('reads every metric of any subscription', async () => {
    const { sub, inc } = await setup([
      { slug: 'calls', kind: 'rolling', quota: null },
      { slug: 'sites', kind: 'fixed', quota: 'none' },
    ]);
    await inc('calls', 7);
    const res = await t.http.get(`/admin/subscriptions/${sub.id}/usage`, { cookie: admin.cookie });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual([
      { metric: 'calls', kind: 'rolling', used: 7, reserved: 0, limit: null, remaining: null, periodStart: sub.currentPeriodStart, periodEnd: sub.currentPeriodEnd },
      { metric: 'sites', kind: 'fixed', used: 0, reserved: 0, limit: 0, remaining: 0, periodStart: sub.createdAt, periodEnd: null },
    ]);
    expect((await t.http.get(`/admin/subscriptions/00000000-0000-4000-8000-000000000000/usage`, { cookie: admin.cookie })).status).toBe(404);
  });
});

describe('access control', () => {
  it('answers 401 to anonymous callers and 403 to users, even for their own subscription', async () => {
    const { sub, u } = await setup([{ slug: 'calls', kind: 'rolling', quota: 5 }]);
    const granted = await grant(sub.id, { metricSlug: 'calls', amount: 1, duration: 'permanent' });
    const calls: Array<[string, string, unknown?]> = [
      ['POST', addonsPath(sub.id), { metricSlug: 'calls', amount: 1, duration: 'permanent' }],
      ['GET', addonsPath(sub.id)],
      ['POST', `${addonsPath(sub.id)}/${granted.body.data.id}/revoke`],
      ['GET', `/admin/subscriptions/${sub.id}/ledger`],
      ['GET', `/admin/subscriptions/${sub.id}/usage`],
    ];
    for (const [method, path, json] of calls) {
      const anonymous = await t.http.call(method, path, json === undefined ? {} : { json });
      expect(anonymous.status, `${method} ${path}`).toBe(401);
      for (const who of [user, u]) {
        const forbidden = await t.http.call(method, path, { cookie: who.cookie, ...(json === undefined ? {} : { json }) });
        expect(forbidden.status, `${method} ${path}`).toBe(403);
        expect(forbidden.body.error.code).toBe('FORBIDDEN');
      }
    }
    const list = await t.http.get(addonsPath(sub.id), { cookie: admin.cookie });
    expect(list.body.data).toHaveLength(1);
    expect(list.body.data[0].status).toBe('active');
  });
});
