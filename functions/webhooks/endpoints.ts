import type { AppDeps } from '../platform/app-types.ts';
import { notFound } from '../http/errors.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { Webhook, WebhookEventType, WebhookWithSecret } from './schemas.ts';
import { newWebhookSecret, SecretBox } from './secrets.ts';
import { iso } from '../platform/clock.ts';

/**
 * An agent's webhook endpoints, managed by platform admins: where the marketplace sends the agent's events, which
 * event types each wants, and the secret that signs them (stored encrypted, shown only when made: secrets.ts).
 */

type Deps = Pick<AppDeps, 'database' | 'clock' | 'config'>;

/** How long the previous secret keeps signing (as a second signature) after a rotation. */
export const PREVIOUS_SECRET_GRACE_MS = 24 * 60 * 60 * 1000;
/** Replaced secrets that still sign, at most: a header of at most four signatures, however often an admin rotates. */
export const EARLIER_SECRETS_KEPT = 3;

interface Row {
  id: string;
  agentId: string;
  url: string;
  events: WebhookEventType[];
  enabled: boolean;
  failingSince: Date | string | null;
  createdAt: Date | string;
  updatedAt: Date | string;
}

const columns = sql`e.id, e.agent_id as "agentId", e.url, to_jsonb(e.events) as events, e.enabled,
  e.failing_since as "failingSince", e.created_at as "createdAt", e.updated_at as "updatedAt"`;

const toWebhook = (r: Row): Webhook => ({
  ...r,
  failingSince: r.failingSince === null ? null : iso(r.failingSince),
  createdAt: iso(r.createdAt),
  updatedAt: iso(r.updatedAt),
});

/** A text[] parameter that binds the same way on both drivers. */
const textArray = (values: readonly string[]) => sql`array(select jsonb_array_elements_text(${JSON.stringify(values)}::text::jsonb))`;

const boxes = new Map<string, SecretBox>();
/** The secret box of this AUTH_SECRET (the key is derived once per process). */
export function secretBox(authSecret: string): SecretBox {
  let box = boxes.get(authSecret);
  if (!box) boxes.set(authSecret, (box = new SecretBox(authSecret)));
  return box;
}

async function requireAgent(db: Db, agentId: string): Promise<void> {
  const agent = await first(db, sql`select 1 from public.agents where id = ${agentId}`);
  if (!agent) throw notFound('Agent', { agentId });
}

export async function listWebhooks(deps: Deps, agentId: string): Promise<Webhook[]> {
  const db = deps.database.db;
  await requireAgent(db, agentId);
  const found = await rows<Row>(
    db,
    sql`select ${columns} from public.webhook_endpoints e where e.agent_id = ${agentId} order by e.created_at desc, e.id desc`,
  );
  return found.map(toWebhook);
}

/** The endpoint, only when it belongs to the agent (another agent's endpoint is not found). */
export async function getWebhook(deps: Deps, agentId: string, webhookId: string): Promise<Webhook> {
  const row = await first<Row>(
    deps.database.db,
    sql`select ${columns} from public.webhook_endpoints e where e.id = ${webhookId} and e.agent_id = ${agentId}`,
  );
  if (!row) throw notFound('Webhook', { agentId, webhookId });
  return toWebhook(row);
}

export async function createWebhook(
  deps: Deps,
  agentId: string,
  input: { url: string; events: WebhookEventType[] },
): Promise<WebhookWithSecret> {
  const db = deps.database.db;
  await requireAgent(db, agentId);
  const id = crypto.randomUUID();
  const secret = newWebhookSecret();
  const sealed = await secretBox(deps.config.authSecret).seal(secret, id);
  const now = deps.clock.now();
  const row = await first<Row>(
    db,
    sql`insert into public.webhook_endpoints as e (id, agent_id, url, events, enabled, secret_encrypted, created_at, updated_at)
        select ${id}, a.id, ${input.url}, ${textArray(input.events)}, true, ${sealed}, ${now}, ${now}
        from public.agents a where a.id = ${agentId}
        returning ${columns}`,
  );
  // The agent was deleted between the check and the insert.
  if (!row) throw notFound('Agent', { agentId });
  return { ...toWebhook(row), secret };
}

/** Why a delivery whose type its endpoint no longer lists was not sent: by the PATCH below, or by the drain's claim. */
export const TYPE_TAKEN_OFF = 'not sent: its event type was taken off the endpoint before it went out';

export async function updateWebhook(
  deps: Deps,
  agentId: string,
  webhookId: string,
  patch: { url?: string | undefined; events?: WebhookEventType[] | undefined; enabled?: boolean | undefined },
): Promise<Webhook> {
  const now = deps.clock.now();
  const row = await first<Row>(
    deps.database.db,
    // "An endpoint gets only the types it lists": narrowing `events` also ends the endpoint's pending deliveries of the
    // types taken off, unsent (before, the backlog of a failing endpoint still went out once it came back). Marked
    // failed rather than skipped by the drain, so they do not stay at the head of the endpoint's queue; an admin can
    // still redeliver one by id. A delivery already claimed by a drain is in flight and goes as it is; if that attempt
    // fails, it is not tried again (the drain's record of the attempt, drain.ts). One this statement cannot see (its
    // change committed while the PATCH ran) is ended the same way by the drain when it comes to it (drain.ts, claim).
    // A new url is a new receiver, and an endpoint enabled again is one the admin says is back: each starts a fresh
    // run (failing_since null) and its pending deliveries are queued again from now (redelivered_at is "queued again
    // at": by an admin's redelivery, or by the endpoint being enabled again or given a new url), so they get their 24
    // hours from their next failure, and their 72 hours from now (public.webhook_retries_over): the time the endpoint
    // was disabled no longer counts against them (review 16: a backlog disabled for three days failed unsent on the
    // first attempt once enabled again). The same url, or enabling one that is enabled, changes neither.
    // The row is read locked first (`current`), so whether this PATCH starts a fresh run is decided on its latest
    // version, the one the update then changes.
    sql`with current as (
        select e.id,
               coalesce(${patch.url ?? null}::text <> e.url or (${patch.enabled === true} and not e.enabled), false) as fresh
          from public.webhook_endpoints e
         where e.id = ${webhookId} and e.agent_id = ${agentId}
           for no key update
      ), updated as (
        update public.webhook_endpoints e set
          url = coalesce(${patch.url ?? null}, e.url),
          events = case when ${patch.events !== undefined} then ${textArray(patch.events ?? [])} else e.events end,
          enabled = coalesce(${patch.enabled ?? null}::boolean, e.enabled),
          failing_since = case when c.fresh then null else e.failing_since end,
          updated_at = ${now}
          from current c
        where e.id = c.id
        returning e.*, c.fresh
      ), pending as (
        -- one update of the endpoint's pending deliveries: those of a type taken off (and not in flight) end unsent,
        -- the others are queued again when the endpoint starts a fresh run: due at once, their retry delays starting
        -- over (the delay the old url earned, up to 2 hours, held the backlog from the new receiver: review 44)
        update public.webhook_deliveries d
           set status = case when o.off and d.claim_id is null then 'failed' else d.status end,
               next_attempt_at = case when d.claim_id is not null then d.next_attempt_at
                                      when o.off then ${now}::timestamptz
                                      when o.fresh then '-infinity'::timestamptz
                                      else d.next_attempt_at end,
               attempts = case when o.fresh and not o.off and d.claim_id is null then 0 else d.attempts end,
               last_error = case when o.off and d.claim_id is null
                                 then ${TYPE_TAKEN_OFF}
                                 else d.last_error end,
               redelivered_at = case when o.off and d.claim_id is null then d.redelivered_at else ${now}::timestamptz end
          from (select x.id, ev.type <> all (u.events) as off, u.fresh
                  from updated u
                  join public.webhook_deliveries x on x.endpoint_id = u.id and x.status = 'pending'
                  join public.webhook_events ev on ev.id = x.event_id) o
         where d.id = o.id and d.status = 'pending' and ((o.off and d.claim_id is null) or o.fresh)
      )
      select ${columns} from updated e`,
  );
  if (!row) throw notFound('Webhook', { agentId, webhookId });
  return toWebhook(row);
}

/** Deletes the endpoint and its deliveries (pending ones are never sent). */
export async function deleteWebhook(deps: Deps, agentId: string, webhookId: string): Promise<{ id: string }> {
  const row = await first<{ id: string }>(
    deps.database.db,
    sql`delete from public.webhook_endpoints where id = ${webhookId} and agent_id = ${agentId} returning id`,
  );
  if (!row) throw notFound('Webhook', { agentId, webhookId });
  return row;
}

/**
 * A new secret, shown once. The one it replaces keeps signing as a further `v1,` signature for 24 hours, so a receiver
 * that has not switched yet still verifies (Standard Webhooks receivers accept any listed signature); so do the ones
 * earlier rotations replaced, each until its own 24 hours end (a second rotation within the day cut the original
 * secret off at once: review 31), at most the EARLIER_SECRETS_KEPT latest.
 */
export async function rotateWebhookSecret(deps: Deps, agentId: string, webhookId: string): Promise<WebhookWithSecret> {
  const secret = newWebhookSecret();
  const sealed = await secretBox(deps.config.authSecret).seal(secret, webhookId);
  const now = deps.clock.now();
  const row = await first<Row>(
    deps.database.db,
    sql`update public.webhook_endpoints e set
          earlier_secrets = (
            select coalesce(jsonb_agg(kept.x order by kept.until desc), '[]'::jsonb)
              from (select x, (x ->> 'until')::timestamptz as until
                      from jsonb_array_elements(
                             jsonb_build_array(jsonb_build_object('secret', e.secret_encrypted,
                                                                  'until', ${new Date(now.getTime() + PREVIOUS_SECRET_GRACE_MS)}::timestamptz))
                             || e.earlier_secrets) as replaced(x)
                     where (x ->> 'until')::timestamptz > ${now}::timestamptz
                     order by until desc
                     limit ${EARLIER_SECRETS_KEPT}) kept),
          secret_encrypted = ${sealed},
          updated_at = ${now}
        where e.id = ${webhookId} and e.agent_id = ${agentId}
        returning ${columns}`,
  );
  if (!row) throw notFound('Webhook', { agentId, webhookId });
  return { ...toWebhook(row), secret };
}
