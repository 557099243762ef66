import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp } from '../support/app.ts';
import { createAdmin, signUp } from '../support/users.ts';
import { activeAgent, buyPaidTier, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * The customer portal opens with the marketplace's own configuration, never the Stripe account's default (review 125's
 * lead): with plan switching on there, a user upgraded in the portal, the higher tier's quota applied at once, and a
 * cancel at period end left the proration Stripe bills with the next renewal unbilled for good. The fake's default
 * configuration allows plan switching, as an account whose owner turned it on does.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

async function subscriber(world: BillingWorld) {
  const agent = await activeAgent(world);
  const user = await signUp(world.t);
  await buyPaidTier(world, user, (await paidTier(world, agent.id, { priceCents: 1500 })).id);
  return { agent, user };
}

/** The configurations the marketplace made at the fake Stripe account. */
const ours = () => [...w.fake.portalConfigurations.values()].filter((c) => c.metadata?.agent_marketplace_portal === 'v1');

/** Opens a portal session as the user; answers the configuration it was opened with. */
async function portalWith(world: BillingWorld, user: { cookie: string }, json: Record<string, unknown>): Promise<string> {
  const res = await world.t.http.post('/me/billing-portal', { cookie: user.cookie, json });
  expect(res.status, res.text).toBe(200);
  const opened = [...w.fake.portalSessions.values()].filter((s) => s.url === res.body.data.url);
  expect(opened).toHaveLength(1);
  return opened[0]!.configuration;
}

describe('the customer portal configuration', () => {
  it("attack: both portal flows open where no plan can be switched (an upgrade a cancel at period end leaves unbilled), not with the account's default that allows it", async () => {
    const a = await subscriber(w);
    const opened = [await portalWith(w, a.user, { flow: 'overview' }), await portalWith(w, a.user, { flow: 'cancel', agentId: a.agent.id })];
    expect(ours()).toHaveLength(1);
    const configuration = ours()[0]!;
    expect(opened).toEqual([configuration.id, configuration.id]);
    expect(configuration.features).toMatchObject({
      subscription_update: { enabled: false },
      subscription_pause: { enabled: false },
      subscription_cancel: { enabled: true, mode: 'at_period_end' },
      payment_method_update: { enabled: true },
      invoice_history: { enabled: true },
    });
  });

  it('is one for the account: other instances use it, and instances replacing it at once make one; changed in the Dashboard to allow plan switching, or deactivated, it is replaced at the next session', async () => {
    const a = await subscriber(w);
    const first = await portalWith(w, a.user, { flow: 'overview' });
    expect(ours().map((c) => c.id)).toEqual([first]);

    // two more instances of the service (their own Stripe clients, as after a restart) on the same Stripe account
    const others = [await startTestApp({ env: w.fake.env() }), await startTestApp({ env: w.fake.env() })];
    let second: string;
    try {
      const worlds = await Promise.all(others.map(async (t) => ({ ...w, t, admin: await createAdmin(t), webhookUrl: `${t.baseUrl}/webhooks/stripe` })));
      const users = await Promise.all(worlds.map(async (world) => (await subscriber(world)).user));
      const atOnce = () => Promise.all(worlds.map((world, i) => portalWith(world, users[i]!, { flow: 'overview' })));
      expect(await atOnce()).toEqual([first, first]);
      // deactivated in the Dashboard: both look for another at once, and Stripe makes one (review 127: they made two)
      await w.fake.client().billingPortal.configurations.update(first, { active: false });
      const [made, alsoMade] = await atOnce();
      second = made!;
      expect(second).not.toBe(first);
      expect(alsoMade).toBe(second);
      expect(ours().filter((c) => c.active).map((c) => c.id)).toEqual([second]);
    } finally {
      await Promise.all(others.map((t) => t.close()));
    }

    // someone turns plan switching on in the Dashboard: the next session does not open with it
    expect(await portalWith(w, a.user, { flow: 'overview' })).toBe(second);
    await w.fake.client().billingPortal.configurations.update(second, { features: { subscription_update: { enabled: true } } });
    const third = await portalWith(w, a.user, { flow: 'cancel', agentId: a.agent.id });
    expect([first, second]).not.toContain(third);
    expect(w.fake.portalConfigurations.get(third)!.features.subscription_update.enabled).toBe(false);
    expect(ours().filter((c) => c.active && !c.features.subscription_update.enabled).map((c) => c.id)).toEqual([third]);
  });
});
