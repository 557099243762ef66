import { z } from '@hono/zod-openapi';
import { requireAgent } from '../catalog/index.ts';
import { ApiError } from '../http/errors.ts';
import { adminQuery } from '../http/pagination.ts';
import { rateLimited } from '../http/rate-limit.ts';
import type { Clock } from '../platform/clock.ts';
import { rows, sql, type Db } from '../platform/db.ts';

/**
 * Marketplace analytics for admins: the purchase funnel (purchased -> activated -> used), the same per agent,
 * and weekly lifecycle trends. The numbers come from two SQL functions (migration 20261122000700_admin.sql,
 * where the definitions are written down); this module only resolves the window and names the fields.
 *
 * Window: [from, to], both ends inclusive. A date-only `from` starts at 00:00 UTC of that day; a date-only `to`
 * includes that whole day (it ends at 23:59:59.999 UTC). Default: the 90 days up to now.
 */

export const DEFAULT_WINDOW_DAYS = 90;
/** Longer windows are refused: the trends list one row per week, and nobody reads 260+ weeks of bars. */
export const MAX_WINDOW_DAYS = 5 * 366;
const DAY_MS = 86_400_000;

const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;
// A date-time without a zone is UTC, as a date is (contract.md: "ISO dates or date-times").
const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:\d{2})?$/;

const instant = (name: 'from' | 'to') =>
  z
    .string()
    .max(40)
    .refine((v) => parseInstant(v, name) !== undefined, {
      message: `${name} must be an ISO date (2026-11-01) or date-time (2026-11-01T12:00:00Z; without a zone, UTC)`,
    })
    .optional()
    .openapi({
      param: { name, in: 'query' },
      description:
        name === 'from'
          ? 'Start of the window, inclusive. A date means 00:00 UTC of that day. Default: `to` minus 90 days.'
          : 'End of the window, inclusive. A date includes that whole day (UTC). Default: now.',
      example: name === 'from' ? '2026-09-01' : '2026-11-30',
    });

export const analyticsQuerySchema = adminQuery({
  from: instant('from'),
  to: instant('to'),
  agentId: z
    .uuid({ message: 'agentId must be a UUID' })
    .optional()
    .openapi({ param: { name: 'agentId', in: 'query' }, description: 'Only this agent' }),
});

const funnelCounts = {
  purchased: z.int().openapi({ description: 'Subscriptions created in the window that were bought (any tier, free included; a checkout never paid is none)' }),
  activated: z.int().openapi({ description: 'Of those, with at least one usage increment or an install of the agent, by `to`' }),
  used: z.int().openapi({ description: 'Of those, with a usage increment in the last 30 days of the window' }),
};

export const analyticsSchema = z
  .object({
    from: z.string().openapi({ description: 'Resolved window start (inclusive)', example: '2026-09-01T00:00:00.000Z' }),
    to: z.string().openapi({ description: 'Resolved window end (inclusive)', example: '2026-11-30T23:59:59.999Z' }),
    funnel: z.object(funnelCounts),
    perAgent: z
      .array(z.object({ agentId: z.uuid(), slug: z.string(), name: z.string(), ...funnelCounts }))
      .openapi({ description: 'Agents with at least one purchase in the window, most purchased first' }),
    trends: z
      .array(
        z.object({
          week: z.string().openapi({ description: 'Monday (UTC) starting the ISO week', example: '2026-11-16' }),
          newSubscriptions: z.int(),
          cancellations: z.int(),
          active: z.int().openapi({ description: 'Live subscriptions at the end of the week (or at `to` for the last week)' }),
        }),
      )
      .openapi({ description: 'One row per ISO week the window touches, oldest first' }),
  })
  .openapi('Analytics');

export type Analytics = z.infer<typeof analyticsSchema>;

/**
 * Parses an ISO date or date-time. Returns undefined for anything else, including impossible calendar dates
 * (2026-02-30) that `Date` would silently roll over. A date-only `to` is the last millisecond of that day.
 */
export function parseInstant(text: string, name: 'from' | 'to'): Date | undefined {
  const date = DATE.exec(text);
  const dateTime = date ? undefined : DATE_TIME.exec(text);
  const m = date ?? dateTime;
  if (!m) return undefined;
  const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const day = new Date(Date.UTC(y, mo - 1, d));
  if (day.getUTCFullYear() !== y || day.getUTCMonth() !== mo - 1 || day.getUTCDate() !== d) return undefined;
  if (date) return name === 'to' ? new Date(day.getTime() + DAY_MS - 1) : day;
  const [h, mi, s] = [Number(m[4]), Number(m[5]), Number(m[6] ?? 0)];
  if (h > 23 || mi > 59 || s > 59) return undefined;
  const zone = m[8] ?? 'Z';
  if (zone !== 'Z' && (Number(zone.slice(1, 3)) > 23 || Number(zone.slice(4, 6)) > 59)) return undefined;
  const parsed = new Date(m[8] ? text : `${text}Z`);
  // An offset can carry 9999-12-31 into year 10000, which JavaScript writes as +010000 and PostgreSQL refuses.
  if (Number.isNaN(parsed.getTime()) || parsed.getUTCFullYear() > 9999) return undefined;
  // timestamptz(3): keep whole milliseconds so a bound compares exactly like the stored timestamps.
  return parsed;
}

export interface AnalyticsWindow {
  from: Date;
  to: Date;
}

/** The window a request asks for, defaulted from the clock; a reversed or over-long window is a 400. */
export function resolveWindow(clock: Clock, query: { from?: string | undefined; to?: string | undefined }): AnalyticsWindow {
  const to = query.to !== undefined ? parseInstant(query.to, 'to')! : clock.now();
  const from = query.from !== undefined ? parseInstant(query.from, 'from')! : new Date(to.getTime() - DEFAULT_WINDOW_DAYS * DAY_MS);
  const invalid = (message: string, path: string) =>
    new ApiError('VALIDATION_ERROR', 'The request is not valid', { issues: [{ path, message }] });
  if (from.getTime() > to.getTime()) throw invalid('from must not be after to', 'query.from');
  if (to.getTime() - from.getTime() > MAX_WINDOW_DAYS * DAY_MS) {
    throw invalid(`the window may span at most ${MAX_WINDOW_DAYS} days`, 'query.to');
  }
  return { from, to };
}

interface FunnelRow {
  agent_id: string;
  slug: string;
  name: string;
  purchased: number;
  activated: number;
  used: number;
}

interface TrendRow {
  week: string;
  new_subscriptions: number;
  cancellations: number;
  active: number;
}

/**
 * The admins whose analytics are being computed in this process. An admin's analytics run one at a time: a window
 * can keep two database connections busy for seconds, and a page of another site can navigate a window it opened
 * through /admin/analytics again and again without a click (a top-level navigation is the admin's own by its fetch
 * metadata, security rule 29; found by a review). The admin page asks once per change of its form; a second call while
 * one runs answers 429 RATE_LIMITED, Retry-After 1. Per process: N instances run at most N at once per admin.
 */
const running = new Set<string>();

export async function analyticsOneAtATime<T>(adminId: string, compute: () => Promise<T>): Promise<T> {
  if (running.has(adminId)) {
    throw rateLimited(1, 'Your previous analytics request is still being computed; ask again when it has answered', { concurrentLimit: 1 });
  }
  running.add(adminId);
  try {
    return await compute();
  } finally {
    running.delete(adminId);
  }
}

export async function getAnalytics(
  db: Db,
  clock: Clock,
  query: { from?: string | undefined; to?: string | undefined; agentId?: string | undefined },
): Promise<Analytics> {
  const { from, to } = resolveWindow(clock, query);
  const agentId = query.agentId ?? null;
  if (agentId) await requireAgent(db, agentId, true);

  // Two independent reads: on a server they run side by side on two connections (the embedded database has
  // one connection and runs them one after the other).
  const [perAgent, trends] = await Promise.all([
    rows<FunnelRow>(
      db,
      sql`select f.agent_id, a.slug, a.name, f.purchased, f.activated, f.used
          from public.admin_analytics_funnel(${from}::timestamptz, ${to}::timestamptz, ${agentId}::uuid) f
          join public.agents a on a.id = f.agent_id
          order by f.purchased desc, a.slug`,
    ),
    rows<TrendRow>(
      db,
      sql`select to_char(week, 'YYYY-MM-DD') as week, new_subscriptions, cancellations, active
          from public.admin_analytics_trends(${from}::timestamptz, ${to}::timestamptz, ${agentId}::uuid)`,
    ),
  ]);

  const sum = (k: 'purchased' | 'activated' | 'used') => perAgent.reduce((n, r) => n + Number(r[k]), 0);
  return {
    from: from.toISOString(),
    to: to.toISOString(),
    funnel: { purchased: sum('purchased'), activated: sum('activated'), used: sum('used') },
    perAgent: perAgent.map((r) => ({
      agentId: r.agent_id,
      slug: r.slug,
      name: r.name,
      purchased: Number(r.purchased),
      activated: Number(r.activated),
      used: Number(r.used),
    })),
    trends: trends.map((r) => ({
      week: r.week,
      newSubscriptions: Number(r.new_subscriptions),
      cancellations: Number(r.cancellations),
      active: Number(r.active),
    })),
  };
}
