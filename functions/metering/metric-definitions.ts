import { ApiError, conflict, isUniqueViolation, notFound, pgCode, pgConstraint } from '../http/errors.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { MetricDefinition, MetricKind } from './schemas.ts';

/**
 * Metric definitions of an agent: what its subscriptions are metered on. `slug` and `kind` never change once
 * created (counters, addons and the ledger are keyed by them); a metric anything refers to cannot be deleted.
 */

interface MetricRow {
  id: string;
  agent_id: string;
  slug: string;
  name: string;
  kind: MetricKind;
  unit: string | null;
  created_at: Date | string;
  updated_at: Date | string;
}

const columns = sql`m.id, m.agent_id, m.slug, m.name, m.kind, m.unit, m.created_at, m.updated_at`;

function toMetricDefinition(row: MetricRow): MetricDefinition {
  return {
    id: row.id,
    agentId: row.agent_id,
    slug: row.slug,
    name: row.name,
    kind: row.kind,
    unit: row.unit,
    createdAt: new Date(row.created_at).toISOString(),
    updatedAt: new Date(row.updated_at).toISOString(),
  };
}

/**
 * The agent must exist, and for anyone but an admin be published (`active` or `coming_soon`): draft and inactive
 * agents do not exist for the public, as in the catalog.
 */
async function requireAgent(db: Db, agentId: string, admin: boolean): Promise<void> {
  const agent = await first(
    db,
    sql`select 1 from public.agents where id = ${agentId} and (${admin} or public.agent_is_published(status))`,
  );
  if (!agent) throw notFound('Agent', { agentId });
}

export async function listMetricDefinitions(db: Db, agentId: string, admin: boolean): Promise<MetricDefinition[]> {
  await requireAgent(db, agentId, admin);
  const found = await rows<MetricRow>(
    db,
    sql`select ${columns} from public.metric_definitions m where m.agent_id = ${agentId} order by m.created_at, m.id`,
  );
  return found.map(toMetricDefinition);
}

export async function getMetricDefinition(db: Db, agentId: string, metricId: string, admin: boolean): Promise<MetricDefinition> {
  const row = await first<MetricRow>(
    db,
    sql`select ${columns} from public.metric_definitions m join public.agents a on a.id = m.agent_id
        where m.id = ${metricId} and m.agent_id = ${agentId} and (${admin} or public.agent_is_published(a.status))`,
  );
  if (!row) throw notFound('Metric definition', { agentId, metricId });
  return toMetricDefinition(row);
}

export async function createMetricDefinition(
  db: Db,
  now: Date,
  agentId: string,
  input: { slug: string; name: string; kind: MetricKind; unit?: string | null | undefined },
): Promise<MetricDefinition> {
  try {
    const row = await first<MetricRow>(
      db,
      sql`insert into public.metric_definitions as m (agent_id, slug, name, kind, unit, created_at, updated_at)
          values (${agentId}, ${input.slug}, ${input.name}, ${input.kind}, ${input.unit ?? null}, ${now}, ${now})
          returning ${columns}`,
    );
    return toMetricDefinition(row!);
  } catch (err) {
    if (isUniqueViolation(err) && pgConstraint(err) === 'metric_definitions_agent_slug_key') {
      throw conflict('This agent already has a metric with that slug', { slug: input.slug });
    }
    if (pgCode(err) === '23503') throw notFound('Agent', { agentId });
    throw err;
  }
}

export async function updateMetricDefinition(
  db: Db,
  now: Date,
  { agentId, metricId, patch }: {
    agentId: string;
    metricId: string;
    patch: { name?: string | undefined; unit?: string | null | undefined; slug?: string | undefined; kind?: string | undefined };
  },
): Promise<MetricDefinition> {
  const current = await getMetricDefinition(db, agentId, metricId, true);
  // Sending the current value back is not a change (clients often PATCH the whole object).
  for (const field of ['slug', 'kind'] as const) {
    if (patch[field] !== undefined && patch[field] !== current[field]) {
      throw new ApiError('IMMUTABLE_FIELD', `A metric's ${field} cannot be changed`, { field, current: current[field] });
    }
  }
  const row = await first<MetricRow>(
    db,
    sql`update public.metric_definitions m
        set name = coalesce(${patch.name ?? null}, m.name),
            unit = case when ${patch.unit !== undefined} then ${patch.unit ?? null} else m.unit end,
            updated_at = ${now}
        where m.id = ${metricId} and m.agent_id = ${agentId}
        returning ${columns}`,
  );
  if (!row) throw notFound('Metric definition', { agentId, metricId });
  return toMetricDefinition(row);
}

/**
 * Deletes a metric no counter, addon or ledger row refers to; its tier quota rows go with it (they are
 * configuration, not history). A counter created concurrently makes the delete fail on its foreign key, which
 * is the same 422.
 */
export async function deleteMetricDefinition(db: Db, agentId: string, metricId: string): Promise<{ id: string }> {
  const inUse = () => new ApiError('METRIC_IN_USE', 'This metric has usage, addons or ledger history and cannot be deleted', { metricId });
  try {
    return await db.transaction().execute(async (trx) => {
      const metric = await first<{ in_use: boolean }>(
        trx,
        sql`select exists (select 1 from public.usage_counters c where c.metric_id = m.id)
                or exists (select 1 from public.usage_addons a where a.metric_id = m.id)
                or exists (select 1 from public.quota_ledger l where l.metric_id = m.id) as in_use
            from public.metric_definitions m where m.id = ${metricId} and m.agent_id = ${agentId}
            for update`,
      );
      if (!metric) throw notFound('Metric definition', { agentId, metricId });
      if (metric.in_use) throw inUse();
      await sql`delete from public.tier_quotas where metric_id = ${metricId}`.execute(trx);
      await sql`delete from public.metric_definitions where id = ${metricId}`.execute(trx);
      return { id: metricId };
    });
  } catch (err) {
    if (pgCode(err) === '23503') throw inUse();
    throw err;
  }
}
