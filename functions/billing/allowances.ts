import type { AppDeps } from '../platform/app-types.ts';
import { enforceDailyAllowance, enforceUserAndAddressAllowance, type Asker } from '../http/rate-limit.ts';
import { giveBackUserAndAddressAllowance, userAndAddressAllowance } from '../platform/rate-limits.ts';

/**
 * How often one caller may ask for what makes an object or a read at Stripe, or a subscription row here. Every paid
 * checkout makes a Checkout Session, every portal request a portal session and every checkout-session read a call
 * at Stripe, all under the marketplace's one Stripe account, whose API rate limit every buyer shares: a user
 * scripting them used up everyone's payments. Every free start writes a subscription (with its carried counters and
 * ledger rows), and a free cancel-and-start loop grew the user's subscription list and the shared tables without end
 * (found by user-side reviews). So, counted in PostgreSQL so every instance shares the count, in a day that opens with
 * the first request, then 429 RATE_LIMITED with Retry-After; far above what a buyer does by hand:
 *   - per user and credential: the user's own (cookie session or the first-party token) has its own count, and each
 *     agent's token one of its own for that user, so no agent can spend the user's allowance, nor another agent's
 *     (found by a review: an agent's token made 50 checkouts of its own tier and the user could no longer buy
 *     anything elsewhere);
 *   - taken once the request is known to be allowed (the tier found and within the token's agent, the portal's
 *     subscription or customer found), so refused requests spend nothing (an agent's token asking for another agent's
 *     tier, 403, used to spend the user's allowance);
 *   - per client address (an IPv6 client's /64), for requests made with the user's own credentials: several times the
 *     per-user figure, since accounts cost nothing (sign-up needs no verified address) and three throwaway accounts
 *     from one address made 150 Checkout Sessions (review 33); enough for an office or a household behind one address.
 *     An agent's token is not counted per address: its address is the agent backend's, shared by all its users
 *     (platform/rate-limits.ts `takeUserAndAddressAllowance`, which takes both counts or neither);
 *   - anonymous checkouts, and their completions, per client address, beside the per-minute limit.
 */
export const CHECKOUTS_PER_DAY = 50;
export const PORTAL_SESSIONS_PER_DAY = 50;
/** Reads of one's checkout sessions (GET /me/checkout/{sessionId}) of one agent's tiers; a success page polls a few times. */
export const CHECKOUT_READS_PER_DAY = 100;
/** Cancels of one's paid subscriptions (POST /me/subscriptions/{agentId}/cancel): each reads Stripe, a repeat too. */
export const CANCELS_PER_DAY = 50;
/** The same per client address, for requests with users' own credentials (all accounts from that address together). */
export const CHECKOUTS_PER_ADDRESS_PER_DAY = 200;
export const PORTAL_SESSIONS_PER_ADDRESS_PER_DAY = 200;
export const CHECKOUT_READS_PER_ADDRESS_PER_DAY = 400;
export const CANCELS_PER_ADDRESS_PER_DAY = 200;
export const ANONYMOUS_CHECKOUTS_PER_DAY = 50;
/**
 * Completions of anonymous checkouts (the success page's POST /checkout/anonymous/complete) per address: each reads
 * the session at Stripe before anything can tell whether the id is anyone's, so made-up ids were 43,200 Stripe reads a
 * day from one address under the per-minute limit alone (found by a review), the way around both allowances above.
 * A success page completes once or twice per purchase, and an address makes at most 50 of those a day.
 */
export const ANONYMOUS_COMPLETIONS_PER_DAY = 100;

const allowances = {
  checkout: userAndAddressAllowance('billing-checkout', 'start a checkout', CHECKOUTS_PER_DAY, CHECKOUTS_PER_ADDRESS_PER_DAY),
  portal: userAndAddressAllowance('billing-portal', 'open the billing portal', PORTAL_SESSIONS_PER_DAY, PORTAL_SESSIONS_PER_ADDRESS_PER_DAY),
  'checkout-read': userAndAddressAllowance('billing-checkout-read', 'read a checkout session', CHECKOUT_READS_PER_DAY, CHECKOUT_READS_PER_ADDRESS_PER_DAY),
  cancel: userAndAddressAllowance('billing-cancel', 'cancel a paid subscription', CANCELS_PER_DAY, CANCELS_PER_ADDRESS_PER_DAY),
};

/**
 * Who asks: the user, the agent whose token asks for them (none for the user's own credentials), and the request's
 * client address (`askerOf` in http/rate-limit.ts).
 */
export type { Asker };

/**
 * Counts one request of `kind` for this user and credential (and, when given, the agent whose object it is asked of:
 * checkout reads are counted per agent whose tier the session sells) and, for the user's own credentials, for the
 * client address; or throws 429 RATE_LIMITED when either day's allowance is used up.
 */
export async function takeBillingAllowance(
  deps: Pick<AppDeps, 'database' | 'clock'>,
  asker: Asker,
  kind: keyof typeof allowances,
  ofAgent?: string,
): Promise<void> {
  await enforceUserAndAddressAllowance(deps, asker, allowances[kind], billingKey(asker, kind, ofAgent));
}

/** Gives back one request taken by `takeBillingAllowance` that turned out to make nothing. */
export async function giveBackBillingAllowance(deps: Pick<AppDeps, 'database' | 'clock'>, asker: Asker, kind: keyof typeof allowances): Promise<void> {
  await giveBackUserAndAddressAllowance(deps, asker, allowances[kind], billingKey(asker, kind));
}

function billingKey(asker: Asker, kind: keyof typeof allowances, ofAgent?: string): string {
  const of = ofAgent ? `|of:${ofAgent}` : '';
  return `billing-${kind}|${asker.userId}|${asker.agentId ?? 'own'}${of}`;
}

const anonymousAllowances = {
  checkout: {
    limit: ANONYMOUS_CHECKOUTS_PER_DAY,
    message: `This address can start ${ANONYMOUS_CHECKOUTS_PER_DAY} checkouts without an account a day; sign in, or try again later`,
  },
  completion: {
    limit: ANONYMOUS_COMPLETIONS_PER_DAY,
    message: `This address can complete ${ANONYMOUS_COMPLETIONS_PER_DAY} checkouts without an account a day; try again later`,
  },
} as const;

/** Counts one anonymous checkout start or completion for this client address (`clientSubject`), or throws 429 RATE_LIMITED. */
export async function takeAnonymousAllowance(
  deps: Pick<AppDeps, 'database' | 'clock'>,
  clientSubject: string,
  kind: keyof typeof anonymousAllowances,
): Promise<void> {
  const { limit, message } = anonymousAllowances[kind];
  await enforceDailyAllowance(deps, `billing-anonymous-${kind}|${clientSubject}`, limit, message);
}
