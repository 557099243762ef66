import { z } from '@hono/zod-openapi';
import { ApiError, conflict, isUniqueViolation, notFound, pgCode, pgConstraint } from '../http/errors.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';

/**
 * Pricing tiers as the catalog shows them. Creating and deleting tiers with Stripe products belongs to billing,
 * which calls `insertTier` here to write the row, so every tier in the API has one shape.
 */

export const tierSchema = z
  .object({
    id: z.uuid(),
    agentId: z.uuid(),
    name: z.string(),
    priceCents: z.int(),
    currency: z.string().openapi({ example: 'usd' }),
    interval: z.enum(['month', 'year']),
    isPublic: z.boolean(),
    features: z.array(z.string()),
    contactSales: z.literal(false),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Tier');

/** Not a stored tier: shown last on every agent's pricing page so buyers can ask for a custom deal. */
export const enterpriseTierSchema = z
  .object({
    id: z.literal('enterprise'),
    agentId: z.uuid(),
    name: z.literal('Enterprise'),
    priceCents: z.null(),
    currency: z.null(),
    interval: z.null(),
    isPublic: z.literal(true),
    features: z.array(z.string()),
    contactSales: z.literal(true),
  })
  .openapi('EnterpriseTier');

export type Tier = z.infer<typeof tierSchema>;
export type EnterpriseTier = z.infer<typeof enterpriseTierSchema>;

export const ENTERPRISE_FEATURES = ['Custom quotas and pricing', 'Dedicated support', 'Security review and SSO', 'Invoice billing'];

export function enterpriseTier(agentId: string): EnterpriseTier {
  return {
    id: 'enterprise',
    agentId,
    name: 'Enterprise',
    priceCents: null,
    currency: null,
    interval: null,
    isPublic: true,
    features: ENTERPRISE_FEATURES,
    contactSales: true,
  };
}

/** What a tier is priced and listed as: the fields every tier shape shares (billing's BillingTier too). */
export type TierBasics = Pick<Tier, 'id' | 'agentId' | 'name' | 'priceCents' | 'currency' | 'interval' | 'isPublic'>;

interface TierRow extends TierBasics {
  features: unknown;
  createdAt: Date | string;
  updatedAt: Date | string;
}

const tierColumns = sql`t.id, t.agent_id as "agentId", t.name, t.price_cents as "priceCents", t.currency, t.interval,
  t.is_public as "isPublic", t.features, t.created_at as "createdAt", t.updated_at as "updatedAt"`;

export function toTier(row: TierRow): Tier {
  return {
    id: row.id,
    agentId: row.agentId,
    name: row.name,
    priceCents: row.priceCents,
    currency: row.currency,
    interval: row.interval,
    isPublic: row.isPublic,
    features: Array.isArray(row.features) ? row.features.map(String) : [],
    contactSales: false,
    createdAt: new Date(row.createdAt).toISOString(),
    updatedAt: new Date(row.updatedAt).toISOString(),
  };
}

export interface NewTier extends Omit<TierBasics, 'id'> {
  features: string[];
  stripeProductId?: string | null;
  stripePriceId?: string | null;
}

/**
 * Writes a tier row (no payment provider involved). Unknown agent -> 404, same name on the agent -> 409.
 * Safe inside the caller's transaction: failures are mapped from the single insert.
 */
export async function insertTier(db: Db, input: NewTier, now?: Date): Promise<Tier> {
  try {
    const row = await first<TierRow>(
      db,
      sql`insert into public.tiers as t (agent_id, name, price_cents, currency, interval, is_public, features,
                                         stripe_product_id, stripe_price_id, created_at, updated_at)
          values (${input.agentId}, ${input.name}, ${input.priceCents}, ${input.currency.toLowerCase()}, ${input.interval},
                  ${input.isPublic}, ${JSON.stringify(input.features)}::text::jsonb, ${input.stripeProductId ?? null},
                  ${input.stripePriceId ?? null}, coalesce(${now ?? null}::timestamptz, now()), coalesce(${now ?? null}::timestamptz, now()))
          returning ${tierColumns}`,
    );
    return toTier(row!);
  } catch (err) {
    if (isUniqueViolation(err) && pgConstraint(err) === 'tiers_agent_name_key') {
      throw conflict('This agent already has a tier with that name', { name: input.name });
    }
    if (pgCode(err) === '23503') throw notFound('Agent', { agentId: input.agentId });
    if (pgCode(err) === '23514') throw new ApiError('VALIDATION_ERROR', 'The tier is not valid', { issues: [] });
    throw err;
  }
}

/**
 * Stored tiers of an agent, cheapest first; hidden ones only when asked (admins). Tiers billing archived
 * (deleted while subscriptions still use them, `archived_at`) are left out for everyone.
 */
export async function listStoredTiers(db: Db, agentId: string, includeHidden: boolean): Promise<Tier[]> {
  const found = await rows<TierRow>(
    db,
    sql`select ${tierColumns} from public.tiers t
        where t.agent_id = ${agentId} and t.archived_at is null and (${includeHidden} or t.is_public)
        order by t.price_cents, t.created_at, t.id`,
  );
  return found.map(toTier);
}

/**
 * The public/hidden toggle: changes `is_public` (and updated_at) only, never the provider product or price.
 * An archived tier stays hidden (404): it is closed to new buyers.
 */
export async function setTierVisibility(
  db: Db,
  now: Date,
  { agentId, tierId, isPublic }: { agentId: string; tierId: string; isPublic: boolean },
): Promise<Tier> {
  const row = await first<TierRow>(
    db,
    sql`update public.tiers t set is_public = ${isPublic}, updated_at = ${now}
        where t.id = ${tierId} and t.agent_id = ${agentId} and t.archived_at is null
        returning ${tierColumns}`,
  );
  if (!row) throw notFound('Tier', { tierId });
  return toTier(row);
}
