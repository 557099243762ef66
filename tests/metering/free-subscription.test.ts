import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findActiveSubscription, findSubscription, startFreeSubscription } from '../../functions/billing/subscriptions.ts';
import { ApiError } from '../../functions/http/errors.ts';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertAgent, insertTier } from '../support/fixtures.ts';
import { insertUser } from './support.ts';

/**
 * Free subscriptions (the service billing's free checkout reuses) and the free billing period rule:
 * monthly from the subscription's start, same day each month, clamped to the month's end, in UTC.
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-01-31T10:00:00.000Z' });
});
afterAll(() => t.close());

describe('startFreeSubscription', () => {
  it('creates an active subscription whose first period is one month from now', async () => {
    const agent = await insertAgent(t.db);
    const tier = await insertTier(t.db, agent.id);
    const userId = await insertUser(t.db);
    const { subscription, created } = await startFreeSubscription(t.db, t.clock, { userId, tierId: tier.id });
    expect(created).toBe(true);
    expect(subscription).toEqual({
      id: expect.any(String),
      userId,
      agentId: agent.id,
      tierId: tier.id,
      status: 'active',
      currentPeriodStart: '2026-01-31T10:00:00.000Z',
      currentPeriodEnd: '2026-02-28T10:00:00.000Z',
      cancelAtPeriodEnd: false,
      pendingTierId: null,
      pendingChangeKind: null,
      createdAt: '2026-01-31T10:00:00.000Z',
    });
    expect(await findActiveSubscription(t.db, t.clock, userId, agent.id)).toEqual(subscription);
  });

  it('returns the existing subscription when the same free tier is started again', async () => {
    const agent = await insertAgent(t.db);
    const tier = await insertTier(t.db, agent.id);
    const userId = await insertUser(t.db);
    const firstStart = await startFreeSubscription(t.db, t.clock, { userId, tierId: tier.id });
    const again = await startFreeSubscription(t.db, t.clock, { userId, tierId: tier.id });
    expect(again).toEqual({ subscription: firstStart.subscription, created: false });
    const [{ n }] = (await rows<{ n: number }>(t.db, sql`select count(*)::int as n from subscriptions where user_id = ${userId}`)) as [{ n: number }];
    expect(n).toBe(1);
  });

  it('refuses a second live subscription to the same agent on another tier (409), also when started concurrently', async () => {
    const agent = await insertAgent(t.db);
    const tierA = await insertTier(t.db, agent.id);
    const tierB = await insertTier(t.db, agent.id);
    const userId = await insertUser(t.db);
    const results = await Promise.allSettled([
      startFreeSubscription(t.db, t.clock, { userId, tierId: tierA.id }),
      startFreeSubscription(t.db, t.clock, { userId, tierId: tierB.id }),
    ]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const rejected = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect(rejected.reason).toBeInstanceOf(ApiError);
    expect((rejected.reason as ApiError).code).toBe('CONFLICT');
  });

  it('refuses a paid tier (422) and an unknown tier (404)', async () => {
    const agent = await insertAgent(t.db);
    const paid = await insertTier(t.db, agent.id, { priceCents: 900 });
    const userId = await insertUser(t.db);
    await expect(startFreeSubscription(t.db, t.clock, { userId, tierId: paid.id })).rejects.toMatchObject({ code: 'INVALID_STATE' });
    await expect(
      startFreeSubscription(t.db, t.clock, { userId, tierId: '00000000-0000-4000-8000-000000000000' }),
    ).rejects.toMatchObject({ code: 'NOT_FOUND' });
    expect(await findActiveSubscription(t.db, t.clock, userId, agent.id)).toBeUndefined();
  });

  it('allows a new subscription after the previous one was canceled, and never finds canceled ones as active', async () => {
    const agent = await insertAgent(t.db);
    const tier = await insertTier(t.db, agent.id);
    const userId = await insertUser(t.db);
    const { subscription } = await startFreeSubscription(t.db, t.clock, { userId, tierId: tier.id });
    await sql`update subscriptions set status = 'canceled' where id = ${subscription.id}`.execute(t.db);
    expect(await findActiveSubscription(t.db, t.clock, userId, agent.id)).toBeUndefined();
    const next = await startFreeSubscription(t.db, t.clock, { userId, tierId: tier.id });
    expect(next.created).toBe(true);
    expect(next.subscription.id).not.toBe(subscription.id);
    expect((await findSubscription(t.db, t.clock, subscription.id))?.status).toBe('canceled');
  });

  it('counts past_due as active', async () => {
    const agent = await insertAgent(t.db);
    const tier = await insertTier(t.db, agent.id);
    const userId = await insertUser(t.db);
    const { subscription } = await startFreeSubscription(t.db, t.clock, { userId, tierId: tier.id });
    await sql`update subscriptions set status = 'past_due' where id = ${subscription.id}`.execute(t.db);
    expect((await findActiveSubscription(t.db, t.clock, userId, agent.id))?.id).toBe(subscription.id);
  });
});

describe('free billing period', () => {
  const period = async (anchor: string, now: string) =>
    first<{ period_start: Date; period_end: Date }>(
      t.db,
      sql`select * from billing_period(${anchor}::timestamptz, null, true, ${now}::timestamptz)`,
    ).then((r) => [r!.period_start.toISOString(), r!.period_end.toISOString()]);

  it('runs monthly from the start, same day each month, clamped to the month end', async () => {
    const anchor = '2026-01-31T10:00:00.000Z';
    expect(await period(anchor, '2026-01-31T10:00:00.000Z')).toEqual(['2026-01-31T10:00:00.000Z', '2026-02-28T10:00:00.000Z']);
    expect(await period(anchor, '2026-02-28T09:59:59.999Z')).toEqual(['2026-01-31T10:00:00.000Z', '2026-02-28T10:00:00.000Z']);
    expect(await period(anchor, '2026-02-28T10:00:00.000Z')).toEqual(['2026-02-28T10:00:00.000Z', '2026-03-31T10:00:00.000Z']);
    // the day comes back to the 31st after a short month (counted from the start, not from the previous period)
    expect(await period(anchor, '2026-04-15T00:00:00.000Z')).toEqual(['2026-03-31T10:00:00.000Z', '2026-04-30T10:00:00.000Z']);
    expect(await period(anchor, '2027-02-01T00:00:00.000Z')).toEqual(['2027-01-31T10:00:00.000Z', '2027-02-28T10:00:00.000Z']);
    expect(await period('2028-01-30T00:00:00.000Z', '2028-02-29T12:00:00.000Z')).toEqual(['2028-02-29T00:00:00.000Z', '2028-03-30T00:00:00.000Z']);
    // a clock before the start stays in the first period
    expect(await period(anchor, '2025-12-01T00:00:00.000Z')).toEqual(['2026-01-31T10:00:00.000Z', '2026-02-28T10:00:00.000Z']);
  });

  it('is what the subscription DTO shows as the clock moves', async () => {
    const agent = await insertAgent(t.db);
    const tier = await insertTier(t.db, agent.id);
    const userId = await insertUser(t.db);
    t.clock.set('2026-05-31T08:00:00.000Z');
    const { subscription } = await startFreeSubscription(t.db, t.clock, { userId, tierId: tier.id });
    expect(subscription.currentPeriodEnd).toBe('2026-06-30T08:00:00.000Z');
    t.clock.set('2026-07-01T00:00:00.000Z');
    const later = await findActiveSubscription(t.db, t.clock, userId, agent.id);
    expect([later?.currentPeriodStart, later?.currentPeriodEnd]).toEqual(['2026-06-30T08:00:00.000Z', '2026-07-31T08:00:00.000Z']);
    expect(later?.createdAt).toBe('2026-05-31T08:00:00.000Z');
  });
});
