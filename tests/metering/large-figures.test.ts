import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_QUOTA_LIMIT } from '../../functions/metering/schemas.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { agentToken, meteredAgent, subscribe } from './support.ts';

/**
 * Usage figures stay exact in JSON (review 77): a tier quota of 2^53 - 1 (then the largest accepted) plus an addon of
 * 10^9 made an effective limit PostgreSQL holds exactly and every usage read answered rounded. A quota is now at most
 * 10^15, so the quota and its addons stay within the numbers JSON holds exactly.
 */
let t: TestApp;
let admin: TestUser;
let user: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  user = await signUp(t, { verified: true });
});
afterAll(() => t?.close());

describe('the largest quotas', () => {
  it('past 10^15 are refused with 400 and change nothing; at 10^15 with an addon, usage reads are exact', async () => {
    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'fixed', quota: 5 }]);
    const asAdmin = { cookie: admin.cookie, headers: { origin: t.baseUrl } };
    const quotaPath = `/agents/${a.agentId}/pricing/${a.tierId}/quotas/${a.metrics.calls}`;
    for (const quotaLimit of [Number.MAX_SAFE_INTEGER, MAX_QUOTA_LIMIT + 1]) {
      const refused = await t.http.put(quotaPath, { ...asAdmin, json: { quotaLimit } });
      expect([quotaLimit, refused.status, refused.body.error?.code]).toEqual([quotaLimit, 400, 'VALIDATION_ERROR']);
    }
    const sub = await subscribe(t, user.userId, a.tierId);
    const bearer = await agentToken(t, user, a.agentId);
    expect((await t.http.get(`/me/usage/${a.agentId}/calls`, { bearer })).body.data.limit).toBe(5);

    expect((await t.http.put(quotaPath, { ...asAdmin, json: { quotaLimit: MAX_QUOTA_LIMIT } })).status).toBe(200);
    const addon = await t.http.post(`/admin/subscriptions/${sub.id}/addons`, { ...asAdmin, json: { metricSlug: 'calls', amount: 999_999_999, duration: 'permanent' } });
    expect(addon.status, addon.text).toBe(201);
    await t.http.post(`/me/usage/${a.agentId}/calls/increment`, { bearer, json: { clientReqId: 'one', amount: 3 } });
    const res = await t.http.get(`/me/usage/${a.agentId}/calls`, { bearer });
    // as written by the service, digit for digit: 10^15 + 999,999,999 and that less the 3 used (both odd)
    expect(/"limit":(\d+)/.exec(res.text)?.[1]).toBe('1000000999999999');
    expect(/"remaining":(\d+)/.exec(res.text)?.[1]).toBe('1000000999999996');
  });
});
