import type { Pagination } from '../http/envelope.ts';
import { notFound } from '../http/errors.ts';
import { afterCursor, finishPage, pageScope, readPage, type CursorSigner } from '../http/pagination.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { LedgerEntry } from './schemas.ts';
import { isoOrNull } from '../platform/clock.ts';

/**
 * The quota ledger of a subscription, newest first (keyset pagination). Ledger ids are time-ordered, so rows
 * written in the same millisecond still come back in the order they were written.
 */

interface LedgerRow {
  id: string;
  subscription_id: string;
  metric_id: string;
  metric: string;
  event: LedgerEntry['event'];
  amount: number | null;
  delta: number;
  used: number | null;
  quota_limit: number | null;
  period_start: Date | string | null;
  period_end: Date | string | null;
  client_req_id: string | null;
  addon_id: string | null;
  actor_user_id: string | null;
  details: Record<string, unknown>;
  createdAt: Date | string;
}

const num = (v: number | null) => (v === null ? null : Number(v));
const iso = isoOrNull;

/**
 * A row's details with its times (`expiresAt`, ...) written as every other time of the API, ISO 8601 with `Z`: the
 * SQL that records them builds jsonb, which writes PostgreSQL's `+00:00` (review 56).
 */
function detailsOf(details: Record<string, unknown> | null): Record<string, unknown> {
  const out: Record<string, unknown> = { ...details };
  for (const [key, value] of Object.entries(out)) {
    if (key.endsWith('At') && typeof value === 'string' && !Number.isNaN(Date.parse(value))) out[key] = iso(value);
  }
  return out;
}

function toLedgerEntry(row: LedgerRow): LedgerEntry {
  return {
    id: row.id,
    subscriptionId: row.subscription_id,
    metricId: row.metric_id,
    metric: row.metric,
    event: row.event,
    amount: num(row.amount),
    delta: Number(row.delta),
    used: num(row.used),
    limit: num(row.quota_limit),
    periodStart: iso(row.period_start),
    periodEnd: iso(row.period_end),
    clientReqId: row.client_req_id,
    addonId: row.addon_id,
    actorUserId: row.actor_user_id,
    details: detailsOf(row.details),
    createdAt: iso(row.createdAt)!,
  };
}

export async function listQuotaLedger(
  db: Db,
  cursors: CursorSigner,
  subscriptionId: string,
  query: { cursor?: string | undefined; limit?: number | undefined },
): Promise<{ items: LedgerEntry[]; pagination: Pagination }> {
  const page = await readPage(cursors, pageScope('quota-ledger', { subscriptionId }), query);
  const exists = await first(db, sql`select 1 from public.subscriptions where id = ${subscriptionId}`);
  if (!exists) throw notFound('Subscription', { subscriptionId });
  const fetched = await rows<LedgerRow>(
    db,
    sql`select l.id, l.subscription_id, l.metric_id, m.slug as metric, l.event, l.amount, l.delta, l.used, l.quota_limit,
               l.period_start, l.period_end, l.client_req_id, l.addon_id, l.actor_user_id, l.details, l.created_at as "createdAt"
        from public.quota_ledger l join public.metric_definitions m on m.id = l.metric_id
        where l.subscription_id = ${subscriptionId} and ${afterCursor(page, 'l')}
        order by l.created_at desc, l.id desc
        limit ${page.limit + 1}`,
  );
  const { items, pagination } = await finishPage(cursors, page, fetched);
  return { items: items.map(toLedgerEntry), pagination };
}
