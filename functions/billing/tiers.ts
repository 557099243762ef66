import type Stripe from 'stripe';
import type { BillingDeps } from './billing-deps.ts';
import { insertTier, type Tier, type TierBasics } from '../catalog/index.ts';
import { ApiError, conflict, notFound, pgCode } from '../http/errors.ts';
import { first, sql } from '../platform/db.ts';
import { askStripe, callStripe, isStripeMissing, requirePayments } from './payments.ts';

/**
 * Pricing tiers as Stripe sees them. A paid tier is a Stripe product with one recurring price; the ids live on
 * the tier row. Decisions (docs/billing.md):
 *   * A paid tier can be created without Stripe configured (a catalog can be prepared, and the demo seed shows
 *     paid tiers); it then has no price, checkout on it answers 503 PAYMENTS_NOT_CONFIGURED, and once Stripe is
 *     configured the product and price are made on its first checkout (`ensureTierPrice`).
 *   * Deleting a tier archives its Stripe product and price. A tier is archived (kept, hidden, closed to checkout)
 *     when subscriptions reference it (current or pending) and whenever it is paid: a checkout opened before the
 *     delete may be paid after it, its events arriving minutes or (with Stripe's retries) days later, and its
 *     price must still name the tier then, or the buyer would be charged every period for nothing served. Only an
 *     unused free tier is deleted.
 */

export interface BillingTier extends TierBasics {
  stripeProductId: string | null;
  stripePriceId: string | null;
  archived: boolean;
  agentStatus: string;
}

export const isPaid = (tier: Pick<BillingTier, 'priceCents'>) => tier.priceCents > 0;

export async function findBillingTier(deps: BillingDeps, tierId: string): Promise<BillingTier | undefined> {
  return first<BillingTier>(
    deps.database.db,
    sql`select t.id, t.agent_id as "agentId", t.name, t.price_cents as "priceCents", t.currency, t.interval,
               t.stripe_product_id as "stripeProductId", t.stripe_price_id as "stripePriceId",
               t.archived_at is not null as archived, t.is_public as "isPublic", a.status as "agentStatus"
          from public.tiers t join public.agents a on a.id = t.agent_id
         where t.id = ${tierId}`,
  );
}

export interface NewTierInput {
  name: string;
  priceCents: number;
  currency: string;
  interval: 'month' | 'year';
  isPublic: boolean;
  features: string[];
}

export async function createTier(deps: BillingDeps, agentId: string, input: NewTierInput): Promise<Tier> {
  const db = deps.database.db;
  const agent = await first<{ name: string }>(db, sql`select name from public.agents where id = ${agentId}`);
  if (!agent) throw notFound('Agent', { agentId });
  const taken = await first(db, sql`select 1 as taken from public.tiers where agent_id = ${agentId} and name = ${input.name}`);
  if (taken) throw conflict('This agent already has a tier with that name', { name: input.name });

  let stripeIds: { stripeProductId: string; stripePriceId: string } | undefined;
  if (input.priceCents > 0 && deps.payments) {
    stripeIds = await createStripePrice(deps, { agentId, agentName: agent.name, ...input });
  }
  try {
    return await insertTier(db, { agentId, ...input, ...stripeIds }, deps.clock.now());
  } catch (err) {
    // Lost a race on the name (or the agent vanished): do not leave a live product behind at Stripe.
    if (stripeIds) await archiveStripePrice(deps, stripeIds).catch(() => undefined);
    throw err;
  }
}

async function createStripePrice(
  deps: BillingDeps,
  tier: { agentId: string; agentName: string; name: string; priceCents: number; currency: string; interval: 'month' | 'year'; tierId?: string },
): Promise<{ stripeProductId: string; stripePriceId: string }> {
  const { stripe } = requirePayments(deps);
  const keyed = (what: string) => (tier.tierId ? { idempotencyKey: `marketplace-tier-${what}:${tier.tierId}` } : undefined);
  const metadata = { agentId: tier.agentId, ...(tier.tierId ? { tierId: tier.tierId } : {}) };
  // askStripe: Stripe refusing the tier (a currency it does not support, an amount out of its range) is the caller's
  // 422 with Stripe's reason, on createTier and on the first checkout or tier change alike; through callStripe it
  // reached the error handler as an unknown error, a 500 for bad input (found by a review).
  const product = await askStripe("the tier's product", () =>
    stripe.products.create({ name: `${tier.agentName} · ${tier.name}`, metadata }, keyed('product')),
  );
  let price: Stripe.Price;
  try {
    price = await askStripe("the tier's price", () =>
      stripe.prices.create(
        {
          product: product.id,
          unit_amount: tier.priceCents,
          currency: tier.currency.toLowerCase(),
          recurring: { interval: tier.interval },
          metadata,
        },
        keyed('price'),
      ),
    );
  } catch (err) {
    // createTier writes no tier then, so its product would stay live at Stripe, for nothing. A first checkout's
    // product is kept: its idempotency key gives the next attempt the same one.
    if (!tier.tierId) await archiveStripePrice(deps, { stripeProductId: product.id, stripePriceId: null }).catch(() => undefined);
    throw err;
  }
  return { stripeProductId: product.id, stripePriceId: price.id };
}

async function archiveStripePrice(deps: BillingDeps, ids: { stripeProductId: string | null; stripePriceId: string | null }) {
  const { stripe } = requirePayments(deps);
  const archive = async (fn: () => Promise<unknown>) => {
    try {
      await callStripe(fn);
    } catch (err) {
      if (!isStripeMissing(err)) throw err; // already gone at Stripe: nothing to archive
    }
  };
  if (ids.stripePriceId) await archive(() => stripe.prices.update(ids.stripePriceId!, { active: false }));
  if (ids.stripeProductId) await archive(() => stripe.products.update(ids.stripeProductId!, { active: false }));
}

/**
 * A paid tier's Stripe price, made now when the tier was created before Stripe was configured.
 * Idempotency keys (per tier) make concurrent first checkouts create one product and one price.
 */
export async function ensureTierPrice(deps: BillingDeps, tier: BillingTier): Promise<string> {
  requirePayments(deps);
  if (tier.stripePriceId) return tier.stripePriceId;
  const agent = await first<{ name: string }>(deps.database.db, sql`select name from public.agents where id = ${tier.agentId}`);
  const ids = await createStripePrice(deps, { ...tier, agentName: agent?.name ?? 'Agent', tierId: tier.id });
  const row = await first<{ stripePriceId: string }>(
    deps.database.db,
    sql`update public.tiers set stripe_product_id = coalesce(stripe_product_id, ${ids.stripeProductId}),
               stripe_price_id = coalesce(stripe_price_id, ${ids.stripePriceId}), updated_at = ${deps.clock.now()}
         where id = ${tier.id}
        returning stripe_price_id as "stripePriceId"`,
  );
  return row?.stripePriceId ?? ids.stripePriceId;
}

export async function deleteTier(deps: BillingDeps, agentId: string, tierId: string): Promise<{ id: string; archived: boolean }> {
  const db = deps.database.db;
  const tier = await first<Pick<BillingTier, 'id' | 'priceCents' | 'stripeProductId' | 'stripePriceId'>>(
    db,
    sql`select id, price_cents as "priceCents", stripe_product_id as "stripeProductId", stripe_price_id as "stripePriceId"
          from public.tiers where id = ${tierId} and agent_id = ${agentId} and archived_at is null`,
  );
  if (!tier) throw notFound('Tier', { tierId });

  if (tier.stripeProductId || tier.stripePriceId) {
    if (deps.payments) await archiveStripePrice(deps, tier);
    else deps.logger.warn('tier deleted without Stripe configured; its Stripe product stays active', { tierId });
  }

  const referenced = await first(
    db,
    sql`select 1 as used from public.subscriptions where tier_id = ${tierId} or pending_tier_id = ${tierId} limit 1`,
  );
  if (referenced || isPaid(tier)) {
    await first(db, sql`update public.tiers set archived_at = ${deps.clock.now()}, is_public = false, updated_at = ${deps.clock.now()} where id = ${tierId}`);
    return { id: tierId, archived: true };
  }
  try {
    await first(db, sql`delete from public.tiers where id = ${tierId}`);
    return { id: tierId, archived: false };
  } catch (err) {
    // A subscription arrived between the check and the delete: archive instead.
    if (pgCode(err) !== '23503') throw err;
    await first(db, sql`update public.tiers set archived_at = ${deps.clock.now()}, is_public = false, updated_at = ${deps.clock.now()} where id = ${tierId}`);
    return { id: tierId, archived: true };
  }
}

/**
 * A tier that can be bought: not archived, of an agent that is not inactive. Buyers see public tiers of active
 * agents only (a hidden tier is a custom deal an admin sends as a checkout link), so anything else is a 404.
 */
export async function purchasableTier(deps: BillingDeps, tierId: string, by: 'buyer' | 'admin'): Promise<BillingTier> {
  const tier = await findBillingTier(deps, tierId);
  const visible =
    tier && !tier.archived && (by === 'admin' ? tier.agentStatus !== 'inactive' : tier.isPublic && tier.agentStatus === 'active');
  if (!visible) {
    // Still a 404 (a hidden tier or an unpublished agent is not disclosed), but the message names every case: a
    // developer whose new agent is still `draft` (createAgent's default) otherwise reads "Tier not found" and
    // looks for a tier that exists.
    throw new ApiError('NOT_FOUND', 'No purchasable tier with this id: it does not exist, is archived or hidden, or its agent is not active (a new agent is draft until its status is active)', { tierId });
  }
  return tier;
}

export function invalidState(message: string, details: Record<string, unknown> = {}) {
  return new ApiError('INVALID_STATE', message, details);
}
