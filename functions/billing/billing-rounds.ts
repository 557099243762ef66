import type { BillingDeps } from './billing-deps.ts';
import { stopRenewalsOfDeletedAgents } from './deleted-agents.ts';
import { undoUnclaimedPurchases } from './unclaimed-purchases.ts';
import { rereadOverdueSubscriptions } from './overdue-subscriptions.ts';
import { startRounds } from '../platform/rounds.ts';

/**
 * The Node entry's billing loop (functions/deps.ts), for a server that no scheduler calls POST /internal/drain on: a
 * round every `everyMs` of what the drain does at Stripe (unclaimed purchases undone, deleted agents' renewals
 * stopped, paid subscriptions overdue for an event read again), any number of instances at once (each step is safe to run concurrently). Returns stop, which waits
 * (bounded) for a round under way.
 */
export function startBillingRounds(deps: BillingDeps, everyMs = 15 * 60_000): () => Promise<void> {
  return startRounds(() => Promise.all([undoUnclaimedPurchases(deps), stopRenewalsOfDeletedAgents(deps), rereadOverdueSubscriptions(deps)]), {
    everyMs,
    failed: (err) => deps.logger.warn('a billing round failed; the next round retries', { err }),
  });
}
