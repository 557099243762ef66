import { randomUUID } from 'node:crypto';
import { first, sql, type Db } from '../../functions/platform/db.ts';

/**
 * Plain SQL fixtures for the core catalog tables, so a test can set up agents and tiers without going through
 * the HTTP endpoints (and before another domain's endpoints exist). Shared: other domains may append theirs.
 * Every name and slug is unique per call unless overridden, so a test file can insert as many as it needs.
 */

export type AgentStatus = 'draft' | 'active' | 'coming_soon' | 'inactive';

export interface AgentRow {
  id: string;
  slug: string;
  name: string;
  description: string;
  longDescription: string | null;
  status: AgentStatus;
  installs: number;
  createdAt: Date;
}

export interface AgentOverrides {
  slug?: string;
  name?: string;
  description?: string;
  longDescription?: string | null;
  status?: AgentStatus;
  installs?: number;
  createdAt?: Date | string;
}

const suffix = () => randomUUID().slice(0, 8);

export async function insertAgent(db: Db, overrides: AgentOverrides = {}): Promise<AgentRow> {
  const tag = suffix();
  const slug = overrides.slug ?? `agent-${tag}`;
  const row = await first<AgentRow>(
    db,
    sql`insert into public.agents (slug, name, description, long_description, status, installs, created_at, updated_at)
        values (${slug}, ${overrides.name ?? `Agent ${tag}`}, ${overrides.description ?? `Test agent ${tag}`},
                ${overrides.longDescription ?? null}, ${overrides.status ?? 'active'}, ${overrides.installs ?? 0},
                coalesce(${overrides.createdAt ? new Date(overrides.createdAt) : null}::timestamptz, now()),
                coalesce(${overrides.createdAt ? new Date(overrides.createdAt) : null}::timestamptz, now()))
        returning id, slug, name, description, long_description as "longDescription", status, installs,
                  created_at as "createdAt"`,
  );
  return row!;
}

export interface TierRow {
  id: string;
  agentId: string;
  name: string;
  priceCents: number;
  currency: string;
  interval: 'month' | 'year';
  isPublic: boolean;
  features: string[];
  stripeProductId: string | null;
  stripePriceId: string | null;
  createdAt: Date;
}

export interface TierOverrides {
  name?: string;
  priceCents?: number;
  currency?: string;
  interval?: 'month' | 'year';
  isPublic?: boolean;
  features?: string[];
  stripeProductId?: string | null;
  stripePriceId?: string | null;
}

/** A tier row (free by default: priceCents 0, monthly, public). */
export async function insertTier(db: Db, agentId: string, overrides: TierOverrides = {}): Promise<TierRow> {
  const row = await first<TierRow>(
    db,
    sql`insert into public.tiers (agent_id, name, price_cents, currency, interval, is_public, features, stripe_product_id, stripe_price_id)
        values (${agentId}, ${overrides.name ?? `Tier ${suffix()}`}, ${overrides.priceCents ?? 0}, ${overrides.currency ?? 'usd'},
                ${overrides.interval ?? 'month'}, ${overrides.isPublic ?? true}, ${JSON.stringify(overrides.features ?? [])}::text::jsonb,
                ${overrides.stripeProductId ?? null}, ${overrides.stripePriceId ?? null})
        returning id, agent_id as "agentId", name, price_cents as "priceCents", currency, interval, is_public as "isPublic",
                  features, stripe_product_id as "stripeProductId", stripe_price_id as "stripePriceId", created_at as "createdAt"`,
  );
  return row!;
}
