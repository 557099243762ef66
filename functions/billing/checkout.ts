import type Stripe from 'stripe';
import type { BillingDeps } from './billing-deps.ts';
import { ApiError, notFound } from '../http/errors.ts';
import type { Principal } from '../http/context.ts';
import { first, sql } from '../platform/db.ts';
import { giveBackBillingAllowance, takeBillingAllowance, type Asker } from './allowances.ts';
import { placeAnonymousPurchase } from './buyer-accounts.ts';
import { claimOfSubscription, purchaseAbandoned, purchaseEnded } from './purchase-claims.ts';
import { withCustomer } from './customers.ts';
import { askStripe, callStripe, isStripeMissing, requirePayments } from './payments.ts';
import { applyStripeRead, localStatus, namedSubscriber, readPurchaseToPlace, servedBefore, undoPurchaseOfDeletedAgent } from './subscription-state.ts';
import { startFreeSubscription, type SubscriptionDto } from './subscriptions.ts';
import { findSubscriptionByStripeId, liveSubscription } from './subscription-queries.ts';
import { requireWithinAgent } from '../http/access.ts';
import { ensureTierPrice, invalidState, isPaid, purchasableTier, type BillingTier } from './tiers.ts';
import { pagesOrigin } from '../platform/config.ts';

/**
 * Checkout: free tiers start at once; paid tiers go through Stripe's hosted Checkout in subscription mode and
 * write nothing locally. The subscription appears when Stripe says it exists (the webhook, or the success page
 * of an anonymous checkout, both through `applyStripeRead`).
 */

/** The shape of a Stripe Checkout Session id, as the API and the success page accept one. */
export const CHECKOUT_SESSION_ID = /^cs_[A-Za-z0-9_]{1,250}$/;

export interface CheckoutUrls {
  successUrl?: string | undefined;
  cancelUrl?: string | undefined;
}

export type StartCheckoutResult =
  | { kind: 'free'; subscription: SubscriptionDto }
  | { kind: 'paid'; checkoutUrl: string; sessionId: string };

export async function startCheckout(
  deps: BillingDeps,
  principal: Principal & Asker,
  input: { tierId: string } & CheckoutUrls,
): Promise<StartCheckoutResult> {
  const tier = await purchasableTier(deps, input.tierId, 'buyer');
  requireWithinAgent(principal, tier.agentId); // an agent's token buys only that agent's tiers
  // The day's allowance counts what a checkout makes (docs/billing.md, Daily allowances): a request refused before it
  // makes anything spends nothing. A paid subscriber clicking "subscribe" again (422 before Stripe) used it up, and
  // then could not start any other agent's tier that day (review 97).
  if (!isPaid(tier)) return { kind: 'free', subscription: await startFreeTier(deps, principal, tier) };
  const buyer = { userId: principal.userId, email: principal.email, name: principal.name };
  const session = await createSubscriptionCheckout(deps, tier, buyer, input, () => takeBillingAllowance(deps, principal, 'checkout'));
  return { kind: 'paid', checkoutUrl: session.url!, sessionId: session.id };
}

/**
 * A free tier's start, taking one of the day's checkouts; given back when it wrote nothing (the tier already held, a
 * live subscription of the agent in the way: 409, the tier closed meanwhile: 404). Taken first, so starts sent at once
 * stay within the allowance.
 */
async function startFreeTier(deps: BillingDeps, principal: Principal & Asker, tier: BillingTier): Promise<SubscriptionDto> {
  await takeBillingAllowance(deps, principal, 'checkout');
  let started: Awaited<ReturnType<typeof startFreeSubscription>>;
  try {
    started = await startFreeSubscription(deps.database.db, deps.clock, { userId: principal.userId, tierId: tier.id });
  } catch (err) {
    if (err instanceof ApiError && err.status < 500) await giveBackBillingAllowance(deps, principal, 'checkout');
    throw err;
  }
  if (!started.created) await giveBackBillingAllowance(deps, principal, 'checkout');
  return started.subscription;
}

/** Admin: a checkout link for a user and a paid tier (also hidden, custom tiers), to share with the user. */
export async function createCheckoutLink(deps: BillingDeps, input: { userId: string; tierId: string }): Promise<{ checkoutUrl: string; sessionId: string }> {
  const user = await first<{ id: string; email: string; name: string }>(
    deps.database.db,
    sql`select id, email, name from "user" where id = ${input.userId}`,
  );
  if (!user) throw notFound('User', { userId: input.userId });
  const tier = await purchasableTier(deps, input.tierId, 'admin');
  if (!isPaid(tier)) throw invalidState('Free tiers need no checkout: the user starts them with POST /me/checkout', { tierId: tier.id });
  const session = await createSubscriptionCheckout(deps, tier, { userId: user.id, email: user.email, name: user.name }, {});
  return { checkoutUrl: session.url!, sessionId: session.id };
}

/** A Checkout Session of a paid tier; `beforeStripe` runs once every refusal of our own has passed (the buyer's allowance). */
async function createSubscriptionCheckout(
  deps: BillingDeps,
  tier: BillingTier,
  buyer: { userId: string; email: string; name?: string },
  urls: CheckoutUrls,
  beforeStripe: () => Promise<void> = async () => {},
): Promise<Stripe.Checkout.Session> {
  const { stripe } = requirePayments(deps);
  const returnUrls = checkoutUrls(deps, urls);
  const live = await liveSubscription(deps, buyer.userId, tier.agentId);
  if (live?.stripeSubscriptionId) {
    throw invalidState('There is already a paid subscription to this agent: change its tier instead of buying another', {
      subscriptionId: live.id,
    });
  }
  await beforeStripe();
  const priceId = await ensureTierPrice(deps, tier);
  // Who and what travel in the session and the subscription it creates, so the webhook can place the
  // subscription without trusting anything else. The tier itself is later read from the price, never from here.
  const metadata = { userId: buyer.userId, tierId: tier.id, agentId: tier.agentId };
  const session = await askStripe('the checkout', () =>
    withCustomer(deps, buyer, (customer) =>
      stripe.checkout.sessions.create({
        mode: 'subscription',
        customer,
        client_reference_id: buyer.userId,
        line_items: [{ price: priceId, quantity: 1 }],
        metadata,
        subscription_data: { metadata },
        ...returnUrls,
      }),
    ),
  );
  await recordSessionMade(deps, session.id, buyer.userId, tier.agentId);
  return session;
}

/**
 * The Checkout Sessions we made, and for whom (migration 20261127004400): a read or an anonymous completion of an id
 * not made here, or made for someone else, is refused before it spends an allowance or asks Stripe. Another site could
 * otherwise navigate a popup through the built-in success page with made-up ids, whose same-origin read is the user's
 * own doing, and spend the user's reads of the day.
 */
async function recordSessionMade(deps: BillingDeps, sessionId: string, userId: string | null, agentId: string): Promise<void> {
  await sql`insert into public.checkout_sessions (session_id, user_id, agent_id) values (${sessionId}, ${userId}, ${agentId})
             on conflict (session_id) do nothing`.execute(deps.database.db);
}

/**
 * The agent was deleted and this purchase of it never served: it is refunded in full and canceled, not placed. One
 * that served before the deletion is the deletion's round's (it runs to its period's end, nothing refunded) and the
 * success page shows it as before: it answered "your payment is refunded in full" for it too, with nothing refunded
 * (review 53).
 */
async function deletedBeforeItServed(deps: BillingDeps, agentId: string, stripeSubscriptionId: string): Promise<boolean> {
  return !!(await first(
    deps.database.db,
    sql`select 1 as gone from public.agents a
         where a.id = ${agentId} and a.status = 'inactive'
           and not ${servedBefore(stripeSubscriptionId)}`,
  ));
}

/** The session as we made it: `userId` null for an anonymous checkout; undefined when we never made it (or it was pruned). */
async function sessionMade(deps: BillingDeps, sessionId: string): Promise<{ userId: string | null; agentId: string } | undefined> {
  return first<{ userId: string | null; agentId: string }>(
    deps.database.db,
    sql`select user_id as "userId", agent_id as "agentId" from public.checkout_sessions where session_id = ${sessionId}`,
  );
}

/** Anonymous checkout: Stripe collects the email; the buyer's account is found or made on completion. */
export async function startAnonymousCheckout(
  deps: BillingDeps,
  input: { tierId: string } & CheckoutUrls,
): Promise<{ checkoutUrl: string; sessionId: string }> {
  const tier = await purchasableTier(deps, input.tierId, 'buyer');
  if (!isPaid(tier)) throw invalidState('Free tiers need an account: sign up, then start the tier with POST /me/checkout', { tierId: tier.id });
  const { stripe } = requirePayments(deps);
  const returnUrls = checkoutUrls(deps, input);
  const priceId = await ensureTierPrice(deps, tier);
  const metadata = { tierId: tier.id, agentId: tier.agentId, anonymous: 'true' };
  const session = await askStripe('the checkout', () =>
    stripe.checkout.sessions.create({
      mode: 'subscription',
      line_items: [{ price: priceId, quantity: 1 }],
      metadata,
      subscription_data: { metadata },
      ...returnUrls,
    }),
  );
  await recordSessionMade(deps, session.id, null, tier.agentId);
  return { checkoutUrl: session.url!, sessionId: session.id };
}

async function retrieveSession(deps: BillingDeps, sessionId: string): Promise<Stripe.Checkout.Session> {
  const { stripe } = requirePayments(deps);
  try {
    return await callStripe(() => stripe.checkout.sessions.retrieve(sessionId));
  } catch (err) {
    if (isStripeMissing(err)) throw notFound('Checkout session', { sessionId });
    throw err;
  }
}

/**
 * Success page of an anonymous checkout. Re-reads the session from Stripe (the id is the only input trusted),
 * places the purchase (placeAnonymousPurchase: a new account, a verified one, or a claim mailed to the address
 * when an unverified account holds it), and runs the same state write as the webhook, so whichever of the two
 * arrives first creates the subscription and the other changes nothing.
 */
export type CompletedAnonymousCheckout =
  | { kind: 'attached'; subscription: SubscriptionDto; user: { id: string; email: string }; created: boolean }
  | { kind: 'claim' };

export async function completeAnonymousCheckout(deps: BillingDeps, sessionId: string): Promise<CompletedAnonymousCheckout> {
  requirePayments(deps);
  // Only an anonymous checkout we made: a made-up id asks Stripe nothing.
  const made = await sessionMade(deps, sessionId);
  if (!made || made.userId !== null) throw notFound('Checkout session', { sessionId });
  const session = await retrieveSession(deps, sessionId);
  // Sessions of signed-in buyers are theirs: this public endpoint would otherwise reveal who bought what.
  if (session.metadata?.anonymous !== 'true') throw notFound('Checkout session', { sessionId });
  const stripeSubscriptionId = typeof session.subscription === 'string' ? session.subscription : session.subscription?.id;
  const paid = session.payment_status === 'paid' || session.payment_status === 'no_payment_required';
  if (session.status !== 'complete' || !paid || !stripeSubscriptionId) {
    throw invalidState('The checkout is not complete yet', { status: session.status, paymentStatus: session.payment_status });
  }
  const email = session.customer_details?.email;
  const customerId = typeof session.customer === 'string' ? session.customer : session.customer?.id;
  if (!email || !customerId) throw invalidState('Stripe has no buyer email for this checkout', { sessionId });
  // A subscription Stripe no longer has is 422 `gone` before an account is made or a mail sent (it was a 500 after both).
  // The same read is written once the purchase is placed (placing it asks Stripe nothing): one Stripe read, not two.
  const read = await readPurchaseToPlace(deps, stripeSubscriptionId);
  // Its agent deleted since the checkout began, before the purchase served: refunded and canceled (if the webhook has
  // not done it yet), and no account is made or attached for it.
  if (await deletedBeforeItServed(deps, made.agentId, stripeSubscriptionId)) {
    await undoPurchaseOfDeletedAgent(deps, read);
    throw invalidState('This agent was removed from the marketplace before your purchase went through: your payment is refunded in full', {
      reason: 'agent_deleted',
    });
  }
  // Placed with nobody here when the webhook places it with nobody (subscriberOf): a purchase whose buyer's account was
  // removed, and one Stripe has ended that nobody holds. The session id outlives both (the success page's URL, in a
  // browser's history), and posting it again made the removed person a new account and mailed it (review 65).
  const named = await namedSubscriber(deps, read.subscription);
  if (named === null || named?.removed || (named === undefined && localStatus(read.subscription.status) === 'canceled')) {
    // (one given up unclaimed says so: it was refunded, which the buyer wants to know)
    throw (await claimOfSubscription(deps, stripeSubscriptionId))?.abandonedAt ? purchaseAbandoned() : purchaseEnded();
  }
  const placement = await placeAnonymousPurchase(
    deps,
    {
      email,
      name: session.customer_details?.name ?? undefined,
      stripeCustomerId: customerId,
      stripeSubscriptionId,
      checkoutSessionId: session.id,
      agentId: session.metadata?.agentId,
      tierId: session.metadata?.tierId,
    },
    // The buyer is back on the success page: an expired claim link is replaced by a new one.
    { renewExpiredClaim: true },
  );
  if (placement.kind === 'claim') return { kind: 'claim' };
  // Given up: a new link would promise a purchase that is refunded and canceled (so would "claim mailed").
  if (placement.kind === 'abandoned') throw purchaseAbandoned();
  const { buyer } = placement;
  await applyStripeRead(deps, read);
  const subscription = await findSubscriptionByStripeId(deps, stripeSubscriptionId);
  if (!subscription) {
    throw new ApiError('INVALID_STATE', 'The subscription could not be activated; contact support', { sessionId });
  }
  return { kind: 'attached', subscription, user: { id: buyer.userId, email: buyer.email }, created: buyer.created };
}

export interface CheckoutSessionView {
  sessionId: string;
  status: string | null;
  paymentStatus: string;
  agentId: string | null;
  tierId: string | null;
  subscription: SubscriptionDto | null;
}

/** Read-through to Stripe for the signed-in buyer's own session; writes nothing (the webhook owns writes). */
export async function verifyCheckoutSession(deps: BillingDeps, principal: Principal & Asker, sessionId: string): Promise<CheckoutSessionView> {
  // Whose session it is, we say (a made-up id, someone else's or an anonymous one: 404, nothing spent, Stripe not
  // asked), and then count the read: per agent whose tier it sells, so the sessions one agent's backend started for the
  // user (it knows their ids) can use up the user's reads of that agent's sessions only.
  requirePayments(deps); // without Stripe, 503 PAYMENTS_NOT_CONFIGURED for any id, as every paid path answers
  const made = await sessionMade(deps, sessionId);
  if (!made || made.userId !== principal.userId) throw notFound('Checkout session', { sessionId });
  requireWithinAgent(principal, made.agentId);
  await takeBillingAllowance(deps, principal, 'checkout-read', made.agentId);
  const session = await retrieveSession(deps, sessionId);
  const owner = session.client_reference_id ?? session.metadata?.userId;
  if (owner !== principal.userId) throw notFound('Checkout session', { sessionId });
  requireWithinAgent(principal, session.metadata?.agentId);
  const stripeSubscriptionId = typeof session.subscription === 'string' ? session.subscription : session.subscription?.id;
  return {
    sessionId: session.id,
    status: session.status,
    paymentStatus: session.payment_status,
    agentId: session.metadata?.agentId ?? null,
    tierId: session.metadata?.tierId ?? null,
    subscription: stripeSubscriptionId ? ((await findSubscriptionByStripeId(deps, stripeSubscriptionId)) ?? null) : null,
  };
}

/**
 * Where Stripe sends the buyer back. Only our own origins (the front end, or the service's pages) are accepted,
 * so a checkout link cannot be turned into a redirect to somewhere else.
 */
function checkoutUrls(deps: BillingDeps, urls: CheckoutUrls): { success_url: string; cancel_url: string } {
  const origin = pagesOrigin(deps.config);
  return {
    success_url: ownUrl(deps, urls.successUrl, 'successUrl') ?? `${origin}/checkout/success?session_id={CHECKOUT_SESSION_ID}`,
    cancel_url: ownUrl(deps, urls.cancelUrl, 'cancelUrl') ?? `${origin}/checkout/canceled`,
  };
}

export function ownUrl(deps: BillingDeps, url: string | undefined, field: string): string | undefined {
  if (url === undefined) return undefined;
  const allowed = [deps.config.publicBaseUrl, deps.config.frontendUrl].filter(Boolean).map((u) => new URL(u!).origin);
  let origin: string;
  try {
    origin = new URL(url).origin;
  } catch {
    origin = '';
  }
  if (!allowed.includes(origin)) {
    throw new ApiError('VALIDATION_ERROR', 'The request is not valid', {
      issues: [{ path: field, message: `must be a URL on ${allowed.join(' or ')}` }],
    });
  }
  return url;
}
