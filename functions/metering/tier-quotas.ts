import { notFound } from '../http/errors.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { TierQuota } from './schemas.ts';

/**
 * Base quotas of a tier, one row per metric: quotaLimit null = unlimited, 0 = deny, no row = deny.
 * A change is written to the ledger of every live subscription on the tier (event `quota_changed`, with the
 * new effective quota), in the same transaction. A change that may lower quotas first takes the counter locks
 * of those subscriptions, so it serializes with in-flight increments (see metering_lock_counters).
 */

interface QuotaRow {
  tier_id: string;
  metric_id: string;
  metric: string;
  quota_limit: number | null;
  updated_at: Date | string;
}

function toTierQuota(row: QuotaRow): TierQuota {
  return {
    tierId: row.tier_id,
    metricId: row.metric_id,
    metric: row.metric,
    quotaLimit: row.quota_limit === null ? null : Number(row.quota_limit),
    updatedAt: new Date(row.updated_at).toISOString(),
  };
}

/**
 * The tier's quotas. A hidden tier, or any tier of an unpublished (draft, inactive) agent, exists only for admins
 * (404 otherwise, as in the catalog).
 */
export async function listTierQuotas(db: Db, agentId: string, tierId: string, admin: boolean): Promise<TierQuota[]> {
  const tier = await first(
    db,
    sql`select 1 from public.tiers t join public.agents a on a.id = t.agent_id
        where t.id = ${tierId} and t.agent_id = ${agentId}
          and (${admin} or (t.is_public and public.agent_is_published(a.status)))`,
  );
  if (!tier) throw notFound('Tier', { agentId, tierId });
  const found = await rows<QuotaRow>(
    db,
    sql`select q.tier_id, q.metric_id, m.slug as metric, q.quota_limit, q.updated_at
        from public.tier_quotas q join public.metric_definitions m on m.id = q.metric_id
        where q.tier_id = ${tierId}
        order by m.slug`,
  );
  return found.map(toTierQuota);
}

interface Target {
  metricSlug: string;
  previous: { quota_limit: number | null } | undefined;
  subscriptionIds: string[];
}

/** Checks tier and metric belong to the agent, locks what the change touches, and reads the current row. */
async function prepareChange(trx: Db, now: Date, agentId: string, tierId: string, metricId: string): Promise<Target> {
  // Both rows held `for key share` to the end: a deletion of the tier or the metric under way is waited for and then
  // found (404), where the quota's write met it in its foreign key (a 500: review 72), and one that starts later waits
  // for this change.
  const found = await first<{ tier_ok: boolean; metric_slug: string | null }>(
    trx,
    sql`select exists (select 1 from public.tiers where id = ${tierId} and agent_id = ${agentId} for key share) as tier_ok,
               (select slug from public.metric_definitions where id = ${metricId} and agent_id = ${agentId} for key share) as metric_slug`,
  );
  if (!found?.tier_ok) throw notFound('Tier', { agentId, tierId });
  if (!found.metric_slug) throw notFound('Metric definition', { agentId, metricId });
  const subscriptions = await rows<{ id: string }>(
    trx,
    sql`select id from public.subscriptions where tier_id = ${tierId} and status <> 'canceled' order by id`,
  );
  const subscriptionIds = subscriptions.map((s) => s.id);
  if (subscriptionIds.length) {
    await sql`select public.metering_lock_counters(${subscriptionIds}::uuid[], ${metricId}, ${now})`.execute(trx);
  }
  const previous = await first<{ quota_limit: number | null }>(
    trx,
    sql`select quota_limit from public.tier_quotas where tier_id = ${tierId} and metric_id = ${metricId} for update`,
  );
  return { metricSlug: found.metric_slug, previous, subscriptionIds };
}

const previousDetails = (previous: Target['previous']) =>
  previous ? { exists: true, quotaLimit: previous.quota_limit === null ? null : Number(previous.quota_limit) } : { exists: false };

/** Which quota a change is for, and who makes it (the admin, recorded in the subscribers' metering events). */
export interface QuotaChange {
  actorUserId: string;
  agentId: string;
  tierId: string;
  metricId: string;
}

export async function upsertTierQuota(
  db: Db,
  now: Date,
  { actorUserId, agentId, tierId, metricId, quotaLimit }: QuotaChange & { quotaLimit: number | null },
): Promise<{ quota: TierQuota; created: boolean }> {
  return db.transaction().execute(async (trx) => {
    const target = await prepareChange(trx, now, agentId, tierId, metricId);
    const row = await first<QuotaRow>(
      trx,
      sql`insert into public.tier_quotas as q (tier_id, metric_id, quota_limit, updated_at)
          values (${tierId}, ${metricId}, ${quotaLimit}, ${now})
          on conflict (tier_id, metric_id) do update set quota_limit = excluded.quota_limit, updated_at = excluded.updated_at
          returning q.tier_id, q.metric_id, ${target.metricSlug}::text as metric, q.quota_limit, q.updated_at`,
    );
    const changed = !target.previous || (target.previous.quota_limit === null ? null : Number(target.previous.quota_limit)) !== quotaLimit;
    if (changed && target.subscriptionIds.length) {
      await sql`select public.metering_record_events(
                  p_subscription_ids => ${target.subscriptionIds}::uuid[], p_metric_id => ${metricId}, p_event => 'quota_changed',
                  p_amount => ${quotaLimit}, p_addon_id => null, p_actor_user_id => ${actorUserId},
                  p_details => ${JSON.stringify({ tierId, quotaLimit, previous: previousDetails(target.previous) })}::text::jsonb,
                  p_now => ${now})`.execute(trx);
    }
    return { quota: toTierQuota(row!), created: !target.previous };
  });
}

/** Removes the row: the metric falls back to 0 (deny) on that tier. */
export async function deleteTierQuota(
  db: Db,
  now: Date,
  { actorUserId, agentId, tierId, metricId }: QuotaChange,
): Promise<{ id: string }> {
  return db.transaction().execute(async (trx) => {
    const target = await prepareChange(trx, now, agentId, tierId, metricId);
    if (!target.previous) throw notFound('Tier quota', { tierId, metricId });
    await sql`delete from public.tier_quotas where tier_id = ${tierId} and metric_id = ${metricId}`.execute(trx);
    if (target.subscriptionIds.length) {
      await sql`select public.metering_record_events(
                  p_subscription_ids => ${target.subscriptionIds}::uuid[], p_metric_id => ${metricId}, p_event => 'quota_changed',
                  p_amount => null, p_addon_id => null, p_actor_user_id => ${actorUserId},
                  p_details => ${JSON.stringify({ tierId, removed: true, previous: previousDetails(target.previous) })}::text::jsonb,
                  p_now => ${now})`.execute(trx);
    }
    return { id: metricId };
  });
}
