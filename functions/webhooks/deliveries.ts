import type { AppDeps } from '../platform/app-types.ts';
import type { Pagination } from '../http/envelope.ts';
import { ApiError, notFound } from '../http/errors.ts';
import { afterCursor, finishPage, pageScope, readPage } from '../http/pagination.ts';
import { first, rows, sql, type RawBuilder } from '../platform/db.ts';
import { getWebhook } from './endpoints.ts';
import type { Delivery, DeliveryStatus, WebhookEventType } from './schemas.ts';
import { iso, isoOrNull } from '../platform/clock.ts';

/** Deliveries of an endpoint for admins (newest first, with their latest attempts), and manual redelivery. */

type Deps = Pick<AppDeps, 'database' | 'clock' | 'config' | 'cursors'>;

/** The body every attempt of an event sends: `{ type, timestamp, data }` (the drain signs exactly this text). */
export function eventPayload(type: WebhookEventType, occurredAt: Date | string, data: Record<string, unknown>) {
  return { type, timestamp: new Date(occurredAt).toISOString(), data };
}

interface Row {
  id: string;
  webhookId: string;
  eventId: string;
  eventType: WebhookEventType;
  status: DeliveryStatus;
  attempts: number;
  nextAttemptAt: Date | string | null;
  lastAttemptAt: Date | string | null;
  deliveredAt: Date | string | null;
  lastStatusCode: number | null;
  lastError: string | null;
  createdAt: Date | string;
  occurredAt: Date | string;
  data: Record<string, unknown>;
  attemptLog: Delivery['attemptLog'];
}

const ATTEMPTS_SHOWN = 20;

const columns = sql`d.id, d.endpoint_id as "webhookId", d.event_id as "eventId", ev.type as "eventType", d.status, d.attempts,
  case when d.status = 'pending' then greatest(d.next_attempt_at, d.created_at) end as "nextAttemptAt",
  d.last_attempt_at as "lastAttemptAt", d.delivered_at as "deliveredAt", d.last_status_code as "lastStatusCode",
  d.last_error as "lastError", d.created_at as "createdAt", ev.occurred_at as "occurredAt", ev.data,
  coalesce((select jsonb_agg(jsonb_build_object('attemptedAt', public.webhook_iso(a.attempted_at), 'durationMs', a.duration_ms,
                                                'statusCode', a.status_code, 'error', a.error)
                             order by a.attempted_at desc, a.id desc)
            from (select * from public.webhook_delivery_attempts a
                   where a.delivery_id = d.id order by a.attempted_at desc, a.id desc limit ${ATTEMPTS_SHOWN}) a),
           '[]'::jsonb) as "attemptLog"`;


function toDelivery(r: Row): Delivery {
  return {
    id: r.id,
    webhookId: r.webhookId,
    eventId: r.eventId,
    eventType: r.eventType,
    status: r.status,
    attempts: r.attempts,
    nextAttemptAt: isoOrNull(r.nextAttemptAt),
    lastAttemptAt: isoOrNull(r.lastAttemptAt),
    deliveredAt: isoOrNull(r.deliveredAt),
    lastStatusCode: r.lastStatusCode,
    lastError: r.lastError,
    createdAt: iso(r.createdAt),
    payload: eventPayload(r.eventType, r.occurredAt, r.data),
    attemptLog: r.attemptLog,
  };
}

function selectDeliveries(where: RawBuilder<unknown>) {
  return sql<Row>`select ${columns}
    from public.webhook_deliveries d join public.webhook_events ev on ev.id = d.event_id
    where ${where}`;
}

export async function listDeliveries(
  deps: Deps,
  agentId: string,
  webhookId: string,
  query: { status?: DeliveryStatus | undefined; cursor?: string | undefined; limit?: number | undefined },
): Promise<{ items: Delivery[]; pagination: Pagination }> {
  await getWebhook(deps, agentId, webhookId);
  const page = await readPage(deps.cursors, pageScope(`admin/webhooks/${webhookId}/deliveries`, { status: query.status }), query);
  const found = await rows<Row>(
    deps.database.db,
    sql`${selectDeliveries(sql`d.endpoint_id = ${webhookId}
          and ${query.status !== undefined ? sql`d.status = ${query.status}` : sql`true`}
          and ${afterCursor(page, 'd')}`)}
        order by d.created_at desc, d.id desc
        limit ${page.limit + 1}`,
  );
  const { items, pagination } = await finishPage(deps.cursors, page, found.map(toDelivery));
  return { items, pagination };
}

/** One delivery by id (any agent: admins only). */
export async function getDelivery(deps: Pick<AppDeps, 'database'>, deliveryId: string): Promise<Delivery> {
  const row = await first<Row>(deps.database.db, selectDeliveries(sql`d.id = ${deliveryId}`));
  if (!row) throw notFound('Webhook delivery', { deliveryId });
  return toDelivery(row);
}

/**
 * Sends a delivered or failed delivery again: it becomes pending, due at once, with a fresh 24-hour retry window
 * (its attempt log stays). It goes out on the next drain, after any earlier pending delivery to the same endpoint.
 * A pending delivery is already on its way: 422 INVALID_STATE. So is one whose event type its endpoint no longer
 * lists: the drain never sends those (docs/webhooks.md), and it answered 200 `pending` and then failed it again unsent
 * (review 31); list the type again first. A delivered one shows no deliveredAt while pending again (the attempt log
 * keeps when it was delivered); redelivered_at is when it was queued again.
 */
export async function redeliver(deps: Pick<AppDeps, 'database' | 'clock'>, deliveryId: string): Promise<Delivery> {
  const row = await first<{ id: string }>(
    deps.database.db,
    sql`update public.webhook_deliveries d
           set status = 'pending', attempts = 0, next_attempt_at = '-infinity', first_attempt_at = null, claim_id = null,
               delivered_at = null, redelivered_at = ${deps.clock.now()}
          from public.webhook_events ev, public.webhook_endpoints e
         where d.id = ${deliveryId} and d.status <> 'pending'
           and ev.id = d.event_id and e.id = d.endpoint_id and ev.type = any (e.events)
         returning d.id`,
  );
  if (!row) {
    const existing = await getDelivery(deps, deliveryId);
    if (existing.status !== 'pending') {
      throw new ApiError('INVALID_STATE', "The endpoint no longer lists this delivery's event type: add it to the endpoint's events, then redeliver", {
        deliveryId,
        reason: 'type_not_listed',
        eventType: existing.eventType,
      });
    }
    throw new ApiError('INVALID_STATE', 'The delivery is already pending: it will be attempted again on its own', {
      deliveryId,
      status: existing.status,
      nextAttemptAt: existing.nextAttemptAt,
    });
  }
  return getDelivery(deps, deliveryId);
}
