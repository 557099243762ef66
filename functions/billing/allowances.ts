import type { AppDeps } from '../platform/app-types.ts';
import { enforceDailyAllowance } from '../http/rate-limit.ts';

/**
 * How often one user may ask for what makes an object at Stripe or a subscription row here. Every paid checkout
 * makes a Checkout Session and every portal request a portal session at Stripe, all under the marketplace's one
 * Stripe account, whose API rate limit every buyer shares: a user scripting them used up everyone's payments. Every
 * free start writes a subscription (with its carried counters and ledger rows), and a free cancel-and-start loop
 * grew the user's subscription list and the shared tables without end (both found by a user-side review). So, per
 * user (whichever credential: cookie, first-party or agent token), counted in PostgreSQL so every instance shares the
 * count, in a day that opens with the first request: at most CHECKOUTS_PER_DAY checkout starts, free or paid, and
 * PORTAL_SESSIONS_PER_DAY portal sessions; then 429 RATE_LIMITED with Retry-After. Far above what a buyer does by hand.
 */
export const CHECKOUTS_PER_DAY = 50;
export const PORTAL_SESSIONS_PER_DAY = 50;

const allowances = {
  checkout: { limit: CHECKOUTS_PER_DAY, message: `You can start ${CHECKOUTS_PER_DAY} checkouts a day; try again later` },
  portal: { limit: PORTAL_SESSIONS_PER_DAY, message: `You can open the billing portal ${PORTAL_SESSIONS_PER_DAY} times a day; try again later` },
} as const;

/** Counts one request of `kind` for the user, or throws 429 RATE_LIMITED when the day's allowance is used up. */
export async function takeBillingAllowance(deps: Pick<AppDeps, 'database' | 'clock'>, userId: string, kind: keyof typeof allowances): Promise<void> {
  const { limit, message } = allowances[kind];
  await enforceDailyAllowance(deps, `billing-${kind}|${userId}`, limit, message);
}
