import { ApiError, notFound } from '../http/errors.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { Addon } from './schemas.ts';
import { isoOrNull } from '../platform/clock.ts';

/**
 * Addons: quota bonuses an admin grants on one metric of one subscription. `permanent` counts for the
 * subscription's life; `one_cycle` (rolling metrics only) counts in the billing period it was granted in and
 * stops counting when the period changes, with no job. Grants and revokes are written to the ledger.
 * A revoke lowers the quota, so it first takes the subscription's counter lock for the metric: an in-flight
 * increment either commits before it or sees the addon gone.
 */

interface AddonRow {
  id: string;
  subscription_id: string;
  metric_id: string;
  metric: string;
  amount: number;
  duration: 'permanent' | 'one_cycle';
  period_start: Date | string | null;
  note: string | null;
  granted_by: string | null;
  revoked_at: Date | string | null;
  revoked_by: string | null;
  created_at: Date | string;
  in_effect: boolean;
}

/** Select list for an addon aliased `a` (with its metric `m` and subscription `s` joined), evaluated at `now`. */
const addonColumns = (now: Date) => sql`a.id, a.subscription_id, a.metric_id, m.slug as metric, a.amount, a.duration, a.period_start,
  a.note, a.granted_by, a.revoked_at, a.revoked_by, a.created_at,
  (a.revoked_at is null and (a.duration = 'permanent' or a.period_start =
     (select p.period_start from public.billing_period(s.current_period_start, s.current_period_end,
                                                        s.stripe_subscription_id is null, ${now}::timestamptz) p))
  ) as in_effect`;

const addonFrom = sql`public.usage_addons a
  join public.metric_definitions m on m.id = a.metric_id
  join public.subscriptions s on s.id = a.subscription_id`;

const iso = isoOrNull;

function toAddon(row: AddonRow): Addon {
  return {
    id: row.id,
    subscriptionId: row.subscription_id,
    metricId: row.metric_id,
    metric: row.metric,
    amount: Number(row.amount),
    duration: row.duration,
    periodStart: iso(row.period_start),
    note: row.note,
    status: row.revoked_at ? 'revoked' : 'active',
    inEffect: row.in_effect,
    grantedBy: row.granted_by,
    revokedAt: iso(row.revoked_at),
    revokedBy: row.revoked_by,
    createdAt: iso(row.created_at)!,
  };
}

/** Who acts on which subscription: the target of an addon grant or revoke (the actor is written to the ledger). */
export interface AddonTarget {
  actorUserId: string;
  subscriptionId: string;
}

export async function grantAddon(
  db: Db,
  now: Date,
  { actorUserId, subscriptionId, addon }: AddonTarget & {
    addon: { metricSlug: string; amount: number; duration: 'permanent' | 'one_cycle'; note?: string | undefined };
  },
): Promise<Addon> {
  return db.transaction().execute(async (trx) => {
    const target = await first<{ status: string; metric_id: string | null; kind: string | null; period_start: Date }>(
      trx,
      sql`select s.status, m.id as metric_id, m.kind, p.period_start
          from public.subscriptions s
          cross join lateral public.billing_period(s.current_period_start, s.current_period_end,
                                                   s.stripe_subscription_id is null, ${now}::timestamptz) p
          left join public.metric_definitions m on m.agent_id = s.agent_id and m.slug = ${addon.metricSlug}
          where s.id = ${subscriptionId}`,
    );
    if (!target) throw notFound('Subscription', { subscriptionId });
    if (!target.metric_id) throw notFound('Metric', { metricSlug: addon.metricSlug });
    if (addon.duration === 'one_cycle' && target.kind !== 'rolling') {
      throw new ApiError('ONE_CYCLE_NOT_ALLOWED', 'A one_cycle addon applies to rolling metrics only; grant a permanent one', {
        metric: addon.metricSlug,
        kind: target.kind,
      });
    }
    if (target.status === 'canceled') {
      throw new ApiError('INVALID_STATE', 'The subscription is canceled', { subscriptionId, status: target.status });
    }
    const inserted = await first<{ id: string }>(
      trx,
      sql`insert into public.usage_addons (subscription_id, metric_id, amount, duration, period_start, note, granted_by, created_at)
          values (${subscriptionId}, ${target.metric_id}, ${addon.amount}, ${addon.duration},
                  ${addon.duration === 'one_cycle' ? target.period_start : null}, ${addon.note ?? null}, ${actorUserId}, ${now})
          returning id`,
    );
    await sql`select public.metering_record_events(
                p_subscription_ids => array[${subscriptionId}]::uuid[], p_metric_id => ${target.metric_id}, p_event => 'addon_granted',
                p_amount => ${addon.amount}, p_addon_id => ${inserted!.id}, p_actor_user_id => ${actorUserId},
                p_details => ${JSON.stringify({ duration: addon.duration, ...(addon.note ? { note: addon.note } : {}) })}::text::jsonb,
                p_now => ${now})`.execute(trx);
    return readAddon(trx, now, subscriptionId, inserted!.id);
  });
}

async function readAddon(db: Db, now: Date, subscriptionId: string, addonId: string): Promise<Addon> {
  const row = await first<AddonRow>(
    db,
    sql`select ${addonColumns(now)} from ${addonFrom} where a.id = ${addonId} and a.subscription_id = ${subscriptionId}`,
  );
  if (!row) throw notFound('Addon', { subscriptionId, addonId });
  return toAddon(row);
}

/** Every addon of the subscription, active and revoked, newest first. */
export async function listAddons(db: Db, now: Date, subscriptionId: string): Promise<Addon[]> {
  const exists = await first(db, sql`select 1 from public.subscriptions where id = ${subscriptionId}`);
  if (!exists) throw notFound('Subscription', { subscriptionId });
  const found = await rows<AddonRow>(
    db,
    sql`select ${addonColumns(now)} from ${addonFrom} where a.subscription_id = ${subscriptionId}
        order by a.created_at desc, a.id desc`,
  );
  return found.map(toAddon);
}

/** Revokes an addon. Idempotent: revoking again changes nothing and returns the same revoked record. */
export async function revokeAddon(
  db: Db,
  now: Date,
  { actorUserId, subscriptionId, addonId }: AddonTarget & { addonId: string },
): Promise<Addon> {
  return db.transaction().execute(async (trx) => {
    const addon = await first<{ metric_id: string; amount: number; revoked_at: Date | null }>(
      trx,
      sql`select metric_id, amount, revoked_at from public.usage_addons where id = ${addonId} and subscription_id = ${subscriptionId}`,
    );
    if (!addon) throw notFound('Addon', { subscriptionId, addonId });
    if (addon.revoked_at) return readAddon(trx, now, subscriptionId, addonId);
    await sql`select public.metering_lock_counters(array[${subscriptionId}]::uuid[], ${addon.metric_id}, ${now})`.execute(trx);
    // Only the first of two concurrent revokes updates the row (the second re-checks revoked_at after waiting).
    const revoked = await first(
      trx,
      sql`update public.usage_addons set revoked_at = ${now}, revoked_by = ${actorUserId}
          where id = ${addonId} and revoked_at is null returning id`,
    );
    if (revoked) {
      await sql`select public.metering_record_events(
                  p_subscription_ids => array[${subscriptionId}]::uuid[], p_metric_id => ${addon.metric_id}, p_event => 'addon_revoked',
                  p_amount => ${addon.amount}, p_addon_id => ${addonId}, p_actor_user_id => ${actorUserId}, p_details => '{}'::jsonb,
                  p_now => ${now})`.execute(trx);
    }
    return readAddon(trx, now, subscriptionId, addonId);
  });
}
