import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { FROM, NOW, TO, WEEKS, seedScenario, type Scenario } from './scenario.ts';

/**
 * GET /admin/analytics against the seeded scenario in scenario.ts, whose table lists every subscription and
 * the answers worked out by hand, including the window edges (created exactly at `from` and at `to`, usage
 * exactly 30 days before `to` and 1 ms earlier, activity 1 ms after `to`).
 */
let t: TestApp;
let admin: TestUser;
let s: Scenario;
beforeAll(async () => {
  t = await startTestApp({ now: NOW });
  admin = await createAdmin(t);
  s = await seedScenario(t);
});
afterAll(() => t.close());

const analytics = (query: string, cookie = admin.cookie) => t.http.get(`/admin/analytics?${query}`, { cookie });
const window = `from=${encodeURIComponent(FROM)}&to=${encodeURIComponent(TO)}`;

describe('GET /admin/analytics', () => {
  it('counts the funnel, per agent and in total, with both window edges inclusive', async () => {
    const res = await analytics(window);
    expect(res.status, res.text).toBe(200);
    expect(res.body.status).toBe('success');
    const data = res.body.data;
    expect(data.from).toBe(FROM);
    expect(data.to).toBe(TO);
    expect(data.funnel).toEqual({ purchased: 6, activated: 5, used: 2 });
    expect(data.perAgent).toEqual([
      { agentId: s.alpha.id, slug: s.alpha.slug, name: 'Alpha', purchased: 4, activated: 3, used: 1 },
      { agentId: s.beta.id, slug: s.beta.slug, name: 'Beta', purchased: 2, activated: 2, used: 1 },
    ]);
  });

  it('gives weekly new subscriptions, cancellations and active-at-week-end, Mondays in UTC', async () => {
    const { trends } = (await analytics(window)).body.data;
    expect(trends.map((w: { week: string }) => w.week)).toEqual(WEEKS);
    expect(trends.map((w: { newSubscriptions: number }) => w.newSubscriptions)).toEqual([1, 1, 0, 1, 1, 1, 0, 1]);
    expect(trends.map((w: { cancellations: number }) => w.cancellations)).toEqual([1, 0, 0, 0, 0, 0, 1, 0]);
    expect(trends.map((w: { active: number }) => w.active)).toEqual([3, 4, 4, 5, 6, 7, 6, 7]);
  });

  it('narrows everything to one agent with agentId', async () => {
    const res = await analytics(`${window}&agentId=${s.alpha.id}`);
    expect(res.status).toBe(200);
    const data = res.body.data;
    expect(data.funnel).toEqual({ purchased: 4, activated: 3, used: 1 });
    expect(data.perAgent).toEqual([{ agentId: s.alpha.id, slug: s.alpha.slug, name: 'Alpha', purchased: 4, activated: 3, used: 1 }]);
    expect(data.trends.map((w: { active: number }) => w.active)).toEqual([2, 3, 3, 3, 4, 5, 4, 5]);
    expect(data.trends.map((w: { newSubscriptions: number }) => w.newSubscriptions)).toEqual([0, 1, 0, 0, 1, 1, 0, 1]);
    expect(data.trends.map((w: { cancellations: number }) => w.cancellations)).toEqual([0, 0, 0, 0, 0, 0, 1, 0]);
  });

  it('reads a date-only `to` as the whole day and a date-only `from` as its start', async () => {
    const res = await analytics('from=2026-09-07&to=2026-11-01');
    expect(res.status).toBe(200);
    expect(res.body.data.from).toBe('2026-09-07T00:00:00.000Z');
    expect(res.body.data.to).toBe('2026-11-01T23:59:59.999Z');
    // s3b (created 1 ms after 12:00 on Nov 1) is inside now, and so are s3's increment and install at that instant.
    // The last 30 days now start at Oct 2 23:59:59.999, after s1's increment: s1 drops out of "used", s3 comes in.
    expect(res.body.data.funnel).toEqual({ purchased: 7, activated: 6, used: 2 });
  });

  it('moves the edges by one millisecond and the edge subscriptions drop out', async () => {
    const later = new Date(new Date(FROM).getTime() + 1).toISOString();
    const earlier = new Date(new Date(TO).getTime() - 1).toISOString();
    const res = await analytics(`from=${encodeURIComponent(later)}&to=${encodeURIComponent(earlier)}`);
    expect(res.status).toBe(200);
    // s1 (at from) and s3 (at to) are out. The last 30 days now start 1 ms earlier, exactly at s7's increment,
    // so s7 counts as used: s5 and s7.
    expect(res.body.data.funnel).toEqual({ purchased: 4, activated: 4, used: 2 });
  });

  it('accepts date-times with an offset, and without a zone as UTC', async () => {
    const res = await analytics(`from=${encodeURIComponent('2026-09-07T02:00:00+02:00')}&to=${encodeURIComponent('2026-11-01T13:00:00+01:00')}`);
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ from: FROM, to: TO, funnel: { purchased: 6, activated: 5, used: 2 } });
    const utc = await analytics('from=2026-09-07T00:00:00&to=2026-11-01T12:00:00.000');
    expect(utc.status, utc.text).toBe(200);
    expect(utc.body.data).toMatchObject({ from: FROM, to: TO, funnel: { purchased: 6, activated: 5, used: 2 } });
  });

  it('defaults to the 90 days up to now (the injected clock)', async () => {
    const res = await analytics('');
    expect(res.status).toBe(200);
    expect(res.body.data.to).toBe(NOW);
    expect(res.body.data.from).toBe(new Date(new Date(NOW).getTime() - 90 * 86_400_000).toISOString());
    // From Aug 22 09:00: s8 (Sep 1) and s3b join; s3's increment (Nov 1) is now inside, s8's (Oct 20) is not in
    // the last 30 days (from Oct 21 09:00): used = s5, s3.
    expect(res.body.data.funnel).toEqual({ purchased: 8, activated: 7, used: 2 });
  });

  it('answers zeros and a row per week for a window without subscriptions', async () => {
    const res = await analytics('from=2026-06-01&to=2026-06-14');
    expect(res.status).toBe(200);
    expect(res.body.data.funnel).toEqual({ purchased: 0, activated: 0, used: 0 });
    expect(res.body.data.perAgent).toEqual([]);
    expect(res.body.data.trends).toEqual([
      { week: '2026-06-01', newSubscriptions: 0, cancellations: 0, active: 0 },
      { week: '2026-06-08', newSubscriptions: 0, cancellations: 0, active: 0 },
    ]);
  });

  it('refuses a reversed, malformed, impossible or over-long window with 400 VALIDATION_ERROR', async () => {
    for (const query of [
      'from=2026-11-02&to=2026-11-01',
      'from=yesterday',
      'to=2026-02-30',
      'from=2026-11-01T25:00:00Z',
      'from=2026-11-01T10',
      'from=2026-11-01T24:00:00',
      'from=2020-01-01&to=2026-01-02',
      'agentId=not-a-uuid',
      'from=',
      'to=9999-12-31T23:59:59-00:01', // year 10000 in UTC, which PostgreSQL cannot hold (it answered 500)
    ]) {
      const res = await analytics(query);
      expect(res.status, query).toBe(400);
      expect(res.body.error.code, query).toBe('VALIDATION_ERROR');
      expect(res.body.error.details.issues.length, query).toBeGreaterThan(0);
    }
  });

  it('answers 404 for an unknown agent', async () => {
    const res = await analytics(`agentId=${randomUUID()}`);
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('NOT_FOUND');
  });

  it('is for platform admins only: anonymous 401, signed-in user 403', async () => {
    const anonymous = await t.http.get(`/admin/analytics?${window}`);
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.error.code).toBe('UNAUTHORIZED');
    expect(anonymous.body.error.details.signInUrl).toBeDefined();
    const user = await signUp(t);
    const forbidden = await analytics(window, user.cookie);
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.error.code).toBe('FORBIDDEN');
  });
});
