import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { createAgent } from '../catalog/helpers.ts';

/**
 * `monthlySpendCents` across currencies (review 87): tiers may be priced in any ISO 4217 currency, and the spend summed
 * $29 + EUR 29 + JPY 1,000 into "6,800 cents", an amount of nothing. It now counts the platform currency only
 * (PLATFORM_CURRENCY, default usd); `monthlySpendByCurrency` has each currency in its own minor units (yen are whole).
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

async function paidTier(currency: string, priceCents: number, interval: 'month' | 'year') {
  const agent = await createAgent(t, admin);
  const res = await t.http.post(`/agents/${agent.id}/pricing`, {
    cookie: admin.cookie,
    json: { name: `Pro ${currency}`, priceCents, currency, interval, isPublic: true, features: [] },
  });
  expect(res.status).toBe(201);
  return { agentId: agent.id, tierId: res.body.data.id as string };
}

/** An active subscription as the Stripe webhook leaves it (no Stripe in this test). */
async function subscribe(user: TestUser, tier: { agentId: string; tierId: string }) {
  const now = t.clock.now();
  const end = new Date(now.getTime() + 30 * 86_400_000);
  await first(
    t.db,
    sql`insert into public.subscriptions (user_id, agent_id, tier_id, status, current_period_start, current_period_end,
                                          stripe_subscription_id, created_at, updated_at, granted_access)
        values (${user.userId}, ${tier.agentId}, ${tier.tierId}, 'active', ${now}, ${end}, ${'sub_' + tier.tierId.slice(0, 8)}, ${now}, ${now}, true)
        returning id`,
  );
}

describe('monthlySpendCents across currencies', () => {
  it('counts only the platform currency (usd); every currency is listed apart in its own minor units', async () => {
    const buyer = await signUp(t);
    await subscribe(buyer, await paidTier('usd', 2900, 'month'));
    await subscribe(buyer, await paidTier('usd', 19900, 'year')); // 1658.33 cents a month
    await subscribe(buyer, await paidTier('EUR', 2900, 'month'));
    await subscribe(buyer, await paidTier('jpy', 12000, 'year')); // JPY has no minor unit: 12,000 yen a year, 1,000 a month

    const expected = {
      monthlySpendCents: 2900 + 1658,
      monthlySpendByCurrency: [
        { currency: 'eur', amountMinor: 2900 },
        { currency: 'jpy', amountMinor: 1000 },
        { currency: 'usd', amountMinor: 4558 },
      ],
    };
    const listed = await t.http.get(`/admin/users?q=${encodeURIComponent(buyer.email)}`, { cookie: admin.cookie });
    expect(listed.status).toBe(200);
    expect(listed.body.data).toHaveLength(1);
    expect(listed.body.data[0]).toMatchObject({ subscriptionCount: 4, ...expected });
    const profile = await t.http.get(`/admin/users/${buyer.userId}`, { cookie: admin.cookie });
    expect(profile.body.data).toMatchObject({ subscriptionCount: 4, ...expected });
  });

  it('a user paying nothing has a spend of 0 and no currencies', async () => {
    const user = await signUp(t);
    const profile = await t.http.get(`/admin/users/${user.userId}`, { cookie: admin.cookie });
    expect(profile.body.data).toMatchObject({ subscriptionCount: 0, monthlySpendCents: 0, monthlySpendByCurrency: [] });
  });
});
