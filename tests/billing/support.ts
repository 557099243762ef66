import { expect } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp, type TestAppOptions } from '../support/app.ts';
import { insertAgent } from '../support/fixtures.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { startStripeFake, type FakeEvent, type StripeFake } from '../stripe-fake/server.ts';

/**
 * A billing test world: the real app on a fresh database, pointed (STRIPE_API_URL) at a fresh Stripe fake, and
 * an admin. Events the fake records are delivered to the app's real webhook endpoint, signed like Stripe's.
 */
export interface BillingWorld {
  t: TestApp;
  fake: StripeFake;
  admin: TestUser;
  webhookUrl: string;
  close(): Promise<void>;
}

export async function startBillingWorld(options: TestAppOptions = {}): Promise<BillingWorld> {
  const fake = await startStripeFake();
  const t = await startTestApp({ ...options, env: { ...fake.env(), ...options.env } });
  const admin = await createAdmin(t);
  return {
    t,
    fake,
    admin,
    webhookUrl: `${t.baseUrl}/webhooks/stripe`,
    close: async () => {
      await t.close();
      await fake.close();
    },
  };
}

/** Delivers events one after another; every delivery must be acknowledged with 200. */
export async function deliver(w: BillingWorld, events: FakeEvent[]): Promise<void> {
  for (const event of events) {
    const res = await w.fake.deliver(w.webhookUrl, event);
    if (res.status !== 200) throw new Error(`webhook answered ${res.status} to ${event.type}: ${await res.text()}`);
  }
}

/** Delivers everything the fake recorded since the last call. */
export async function deliverPending(w: BillingWorld): Promise<FakeEvent[]> {
  const events = w.fake.takeEvents();
  await deliver(w, events);
  return events;
}

/** An active agent with a paid tier created over HTTP (so it has a Stripe product and price in the fake). */
export async function paidTier(
  w: BillingWorld,
  agentId: string,
  fields: { name?: string; priceCents?: number; interval?: 'month' | 'year'; isPublic?: boolean } = {},
): Promise<{ id: string; priceCents: number; stripePriceId: string }> {
  const res = await w.t.http.post(`/agents/${agentId}/pricing`, {
    cookie: w.admin.cookie,
    json: {
      name: fields.name ?? `Pro ${Math.random().toString(36).slice(2, 8)}`,
      priceCents: fields.priceCents ?? 2000,
      currency: 'usd',
      interval: fields.interval ?? 'month',
      isPublic: fields.isPublic ?? true,
      features: ['More runs'],
    },
  });
  if (res.status !== 201) throw new Error(`createTier answered ${res.status}: ${res.text}`);
  const row = await first<{ stripePriceId: string }>(w.t.db, sql`select stripe_price_id as "stripePriceId" from tiers where id = ${res.body.data.id}`);
  return { id: res.body.data.id, priceCents: res.body.data.priceCents, stripePriceId: row!.stripePriceId };
}

export async function activeAgent(w: BillingWorld) {
  return insertAgent(w.t.db, { status: 'active' });
}

/**
 * A signed-in user checks out a paid tier, pays on the fake's hosted page, and the events are delivered:
 * the user ends with an active paid subscription. Returns the Stripe subscription id too.
 */
export async function buyPaidTier(w: BillingWorld, user: TestUser, tierId: string) {
  const checkout = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId } });
  if (checkout.status !== 200) throw new Error(`checkout answered ${checkout.status}: ${checkout.text}`);
  const stripeSub = w.fake.completeCheckout(checkout.body.data.sessionId);
  await deliverPending(w);
  const local = await first<{ id: string }>(w.t.db, sql`select id from subscriptions where stripe_subscription_id = ${stripeSub.id}`);
  if (!local) throw new Error('the webhook did not place the subscription');
  return { sessionId: checkout.body.data.sessionId as string, stripeSubscriptionId: stripeSub.id as string, subscriptionId: local.id };
}

/**
 * A signed-in user opens a Checkout for a new paid tier of a new active agent (Stripe's page open, nothing paid yet):
 * the start of every test of what happens between the checkout and its payment.
 */
export async function openPaidCheckout(w: BillingWorld, tierFields: Parameters<typeof paidTier>[2] = {}) {
  const agent = await activeAgent(w);
  const tier = await paidTier(w, agent.id, tierFields);
  const user = await signUp(w.t);
  const checkout = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.id } });
  if (checkout.status !== 200) throw new Error(`checkout answered ${checkout.status}: ${checkout.text}`);
  return { agent, tier, user, sessionId: checkout.body.data.sessionId as string };
}

/** The success page of an anonymous checkout, as the buyer's browser posts it (public: the session id is the credential). */
export function completeAnonymous(w: BillingWorld, sessionId: string) {
  return w.t.http.post('/checkout/anonymous/complete', { json: { sessionId } });
}

/** How many accounts hold the address (any case). */
export async function accountsWith(w: BillingWorld, email: string): Promise<number> {
  return (await first<{ n: number }>(w.t.db, sql`select count(*)::int as n from "user" where lower(email) = lower(${email})`))!.n;
}

/** An admin removes the account through the auth library's admin endpoint. */
export function removeUser(w: BillingWorld, userId: string) {
  return w.t.http.post('/api/auth/admin/remove-user', { cookie: w.admin.cookie, headers: { origin: w.t.baseUrl }, json: { userId } });
}

export async function countRows(t: TestApp, table: 'subscriptions' | 'stripe_events' | 'billing_customers'): Promise<number> {
  const row = await first<{ n: number }>(t.db, sql`select count(*)::int as n from ${sql.table(table)}`);
  return row!.n;
}

/** The drain token the deleted-agents tests give their world: `startBillingWorld({ env: { DRAIN_TOKEN } })`. */
export const DRAIN_TOKEN = 'drain-token-for-tests-0123456789abcdef';

/**
 * What the deleted-agents tests do to a world started with DRAIN_TOKEN (a getter: the world is made in beforeAll):
 * run the background round (POST /internal/drain), delete and restore an agent as an admin, and make a paid
 * subscriber whose agent was deleted, its renewal stopped by a round, and the agent restored since.
 */
export function deletedAgentRounds(world: () => BillingWorld) {
  const drain = async () => {
    const res = await world().t.http.post('/internal/drain', { bearer: DRAIN_TOKEN });
    expect(res.status, res.text).toBe(200);
    return res.body.data as { deletedAgents: { renewalsStopped: number; renewalsResumed: number; failed: number } };
  };
  const del = async (agentId: string) =>
    expect((await world().t.http.delete(`/agents/${agentId}`, { cookie: world().admin.cookie })).status).toBe(200);
  const restore = async (agentId: string) =>
    expect((await world().t.http.patch(`/agents/${agentId}`, { cookie: world().admin.cookie, json: { status: 'active' } })).status).toBe(200);
  const stoppedThenRestored = async () => {
    const w = world();
    const agent = await activeAgent(w);
    const user = await signUp(w.t);
    const bought = await buyPaidTier(w, user, (await paidTier(w, agent.id, { priceCents: 1500 })).id);
    await del(agent.id);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
    await deliverPending(w);
    await restore(agent.id);
    return { agent, user, ...bought };
  };
  return { drain, del, restore, stoppedThenRestored };
}
