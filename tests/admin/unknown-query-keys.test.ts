import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * A query key an admin read does not know is a 400 VALIDATION_ERROR naming it (review 87): dropped silently, a
 * misspelled filter (`?userid=`) or one the list does not have (`?role=`, `?sort=`) answered every row as if filtered.
 * Public catalog routes keep ignoring extra keys (shared links carry tracking parameters).
 */
let t: TestApp;
let admin: TestUser;
let other: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  other = await signUp(t);
});
afterAll(() => t.close());

const someUuid = '00000000-0000-4000-8000-000000000000';

describe('admin query keys', () => {
  it.each([
    [`/admin/subscriptions?userid=${'x'.repeat(12)}`, 'userid'],
    [`/admin/subscriptions?agent_id=${someUuid}`, 'agent_id'],
    ['/admin/users?role=platform_admin', 'role'],
    ['/admin/users?sort=email', 'sort'],
    ['/admin/users?banned=true&limit=5', 'banned'],
    [`/admin/analytics?agent=${someUuid}`, 'agent'],
    ['/admin/interactions?kind=install', 'kind'],
    [`/admin/subscriptions/${someUuid}/ledger?sort=asc`, 'sort'],
    [`/admin/agents/${someUuid}/webhooks/${someUuid}/deliveries?state=failed`, 'state'],
    // not paginated: limit is no key of this list (the contract makes limit=0 a 400)
    ['/admin/notification-recipients?limit=0', 'limit'],
  ])('%s is 400 VALIDATION_ERROR naming the key', async (path, key) => {
    const res = await t.http.get(path, { cookie: admin.cookie });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ status: 'error', data: null, error: { code: 'VALIDATION_ERROR' } });
    expect(res.body.error.details.issues).toEqual([{ path: 'query', message: expect.stringContaining(`"${key}"`) }]);
  });

  it('the keys each read has still work', async () => {
    const users = await t.http.get(`/admin/users?q=${encodeURIComponent(other.email)}&limit=5&cursor=`, { cookie: admin.cookie });
    expect(users.status).toBe(200);
    expect(users.body.data.map((u: { id: string }) => u.id)).toEqual([other.userId]);
    expect((await t.http.get(`/admin/subscriptions?userId=${other.userId}&status=active`, { cookie: admin.cookie })).status).toBe(200);
    expect((await t.http.get('/admin/analytics?from=2026-01-01&to=2026-02-01', { cookie: admin.cookie })).status).toBe(200);
    expect((await t.http.get('/admin/notification-recipients', { cookie: admin.cookie })).status).toBe(200);
  });

  it('a public list still ignores a key it does not know', async () => {
    const res = await t.http.get('/agents?utm_source=newsletter&limit=5');
    expect(res.status).toBe(200);
  });
});
