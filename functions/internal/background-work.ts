import type { AppDeps } from '../platform/app-types.ts';
import {
  rereadOverdueSubscriptions,
  stopRenewalsOfDeletedAgents,
  undoUnclaimedPurchases,
  type DeletedAgentsReport,
  type OverdueSubscriptionsReport,
  type UnclaimedPurchasesReport,
} from '../billing/index.ts';
import { first, isConnectionLost, sql } from '../platform/db.ts';
import { startRounds } from '../platform/rounds.ts';
import { drainWebhookOutbox, type DrainResult } from '../webhooks/index.ts';

/**
 * The service's background work, as one bounded call that any process may make at any time, any number at once:
 *   - housekeeping, in SQL (public.background_housekeeping, migrations 20261123000700, 20261125000600,
 *     20261125000800, 20261125000900 and 20261127004400): expired revocation-list rows, ended rate-limit windows,
 *     expired usage reservations (whose ledger rows and reservation.expired webhooks otherwise wait for the next read
 *     of their counter), mails done a week ago, agent-webhook deliveries and events 30 days after they ended, expired
 *     sessions, verification rows and refresh tokens, records of Checkout Sessions made 30 days ago;
 *   - the mail outbox (platform/mailer.ts) and the agent-webhook outbox (webhooks/drain.ts), each claiming what it
 *     sends with FOR UPDATE SKIP LOCKED under a lease, so concurrent drains never send the same mail or delivery;
 *   - when payments are configured, anonymous purchases nobody claimed, canceled and refunded at Stripe
 *     (billing/unclaimed-purchases.ts), each held under a lease too, and mailed about once; and the paid subscriptions
 *     of deleted agents set to end at their period's end, their users mailed once (billing/deleted-agents.ts); and
 *     paid subscriptions whose period ended a day ago with no event from Stripe, read again from Stripe
 *     (billing/overdue-subscriptions.ts).
 *
 * Production runs no long-lived process of ours: on Supabase, pg_cron runs the housekeeping in SQL and asks the
 * Edge Function to drain the outboxes through pg_net (POST /internal/drain, routes.ts beside this file); on a plain
 * server an external scheduler calls the same endpoint, or the Node entry's loops do the outboxes. See README.md,
 * "Background work".
 */

export interface HousekeepingReport {
  revokedTokensPruned: number;
  rateLimitsPruned: number;
  reservationsExpired: number;
  /** mails done (sent, logged or failed for good) more than 7 days ago, deleted: they carry links with tokens */
  mailPruned: number;
  /** agent-webhook deliveries done (delivered or failed) more than 30 days ago, deleted with their attempts */
  webhookDeliveriesPruned: number;
  /** agent-webhook events more than 30 days old that no delivery refers to any more, deleted */
  webhookEventsPruned: number;
  /** expired sign-in sessions, deleted (the access tokens bound to them stop working, as after a sign-out) */
  sessionsPruned: number;
  /** expired verification links, password-reset tokens and authorization codes, deleted */
  verificationsPruned: number;
  /** expired OAuth refresh tokens, deleted */
  refreshTokensPruned: number;
  /** records of Checkout Sessions made more than 30 days ago, deleted (their reads answer 404 since) */
  checkoutSessionsPruned: number;
}

/** The parts of one round of background work, each run and reported on its own. */
export const BACKGROUND_PARTS = ['housekeeping', 'mail', 'webhooks', 'purchases', 'deletedAgents', 'overdueSubscriptions'] as const;
export type BackgroundPart = (typeof BACKGROUND_PARTS)[number];

export interface CompletedBackgroundWork {
  housekeeping: HousekeepingReport;
  mail: { handled: number };
  webhooks: DrainResult;
  /** anonymous purchases nobody claimed: given up this round, and undone (refunded, canceled, mailed) this round */
  purchases: UnclaimedPurchasesReport;
  /** paid subscriptions of deleted (inactive) agents set to end at their period's end this round */
  deletedAgents: DeletedAgentsReport;
  /** paid subscriptions overdue for a Stripe event, read again from Stripe this round */
  overdueSubscriptions: OverdueSubscriptionsReport;
}

/** What one round did: each part's report, null for a part that failed (named in `failed`, its error logged). */
export type BackgroundWorkReport = { [P in BackgroundPart]: CompletedBackgroundWork[P] | null } & {
  /** the parts that failed this round, in BACKGROUND_PARTS order; empty when every part ran */
  failed: BackgroundPart[];
  durationMs: number;
};

export const DEFAULT_DRAIN_LIMIT = 100;

type Deps = Pick<AppDeps, 'database' | 'clock' | 'logger' | 'config' | 'mailer' | 'payments' | 'auth'>;

/**
 * One bounded round: housekeeping, up to `limit` mails and `limit` webhook attempts, a few unclaimed purchases
 * undone, a few deleted agents' renewals stopped and a few overdue paid subscriptions read again, all side by side and
 * each on its own: a slow Stripe holds back no mail (their mails go out in the next round), and neither does the
 * housekeeping. Review 25: the housekeeping ran first, and the outboxes only after it; it waits for row locks (the
 * users of expired sessions, FOR KEY SHARE, behind a password change or a ban) up to statement_timeout (30 s), so
 * while it waited no mail and no webhook left (this call is how they leave on Supabase), and when it failed the whole
 * call failed with nothing sent. A part that fails now leaves the others' work done and reported; it is logged with
 * its name, and reported in `failed`.
 */
export async function runBackgroundWork(deps: Deps, options: { limit?: number } = {}): Promise<BackgroundWorkReport> {
  const started = performance.now();
  const limit = options.limit ?? DEFAULT_DRAIN_LIMIT;
  const parts: { [P in BackgroundPart]: () => Promise<CompletedBackgroundWork[P]> } = {
    housekeeping: () => runHousekeeping(deps),
    mail: async () => ({ handled: await deps.mailer.deliverPending({ limit }) }),
    webhooks: () => drainWebhookOutbox(deps, { limit }),
    purchases: () => undoUnclaimedPurchases(deps),
    deletedAgents: () => stopRenewalsOfDeletedAgents(deps),
    overdueSubscriptions: () => rereadOverdueSubscriptions(deps),
  };
  const outcomes = await Promise.allSettled(BACKGROUND_PARTS.map((part) => parts[part]()));
  const reports: Record<string, unknown> = {};
  const failed: BackgroundPart[] = [];
  BACKGROUND_PARTS.forEach((part, i) => {
    const outcome = outcomes[i]!;
    reports[part] = outcome.status === 'fulfilled' ? outcome.value : null;
    if (outcome.status === 'fulfilled') return;
    failed.push(part);
    // A database away or too slow (a lock wait past statement_timeout) is the operator's to see, not a bug of ours.
    const log = isConnectionLost(outcome.reason) ? deps.logger.warn : deps.logger.error;
    log.call(deps.logger, `background work: ${part} failed; the other parts ran`, { part, err: outcome.reason });
  });
  return { ...reports, failed, durationMs: Math.round(performance.now() - started) } as BackgroundWorkReport;
}

/**
 * The SQL housekeeping at the database's clock less 5 minutes, as the pg_cron job runs it (`background_housekeeping()`,
 * migration 20261127007000). Review 25: it ran at the instance's own clock, so an instance whose clock ran ahead pruned
 * sessions, verification links and rate-limit windows early; review 99: at the database's own clock, an instance whose
 * clock ran behind had its live holds expired and its running rate-limit windows deleted.
 */
export async function runHousekeeping(deps: Pick<AppDeps, 'database'>): Promise<HousekeepingReport> {
  const row = await first<{ report: HousekeepingReport | string }>(
    deps.database.db,
    sql`select public.background_housekeeping()::text as report`,
  );
  return JSON.parse(String(row!.report)) as HousekeepingReport;
}

/**
 * The Node entry's housekeeping (functions/deps.ts starts it beside the mail and webhook loops): the same SQL as the
 * pg_cron job and the drain, once at start and then every `everyMs`, one round at a time. Where neither pg_cron nor a
 * cron calling the drain runs it (a plain PostgreSQL server, PGlite under `npm start`), only the revocation list used
 * to be pruned: expired sessions, verification rows (reset tokens, authorization codes) and refresh tokens, done mails
 * and webhook history were never deleted (found by a review). Each round is bounded per kind, so a backlog is worked
 * off over minutes; any number of instances may run it, as any number of drains may. Failures are logged and the
 * next round tries again.
 */
export function startHousekeeping(deps: Pick<AppDeps, 'database' | 'logger'>, everyMs = 60_000): () => Promise<void> {
  return startRounds(() => runHousekeeping(deps), {
    everyMs,
    atStart: true,
    failed: (err) => deps.logger.warn('housekeeping failed; the next round retries', { err }),
  });
}

/** Whether `presented` is the configured token, compared in constant time (digests of equal length). */
export async function isDrainToken(presented: string, expected: string): Promise<boolean> {
  const encoder = new TextEncoder();
  const [a, b] = await Promise.all([
    crypto.subtle.digest('SHA-256', encoder.encode(presented)),
    crypto.subtle.digest('SHA-256', encoder.encode(expected)),
  ]);
  const x = new Uint8Array(a);
  const y = new Uint8Array(b);
  let difference = 0;
  for (let i = 0; i < x.length; i++) difference |= x[i]! ^ y[i]!;
  return difference === 0;
}
