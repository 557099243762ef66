import type { AppDeps } from '../platform/app-types.ts';
import { ApiError } from '../http/errors.ts';
import type { Payments } from '../platform/stripe.ts';

/** The Stripe client, or 503 PAYMENTS_NOT_CONFIGURED when the deployment has no STRIPE_SECRET_KEY. */
export function requirePayments(deps: Pick<AppDeps, 'payments'>): Payments {
  if (!deps.payments) {
    throw new ApiError('PAYMENTS_NOT_CONFIGURED', 'Paid plans are not available: this deployment has no Stripe key configured');
  }
  return deps.payments;
}

/** Stripe says the object does not exist (a stale id, an object from another account or mode). */
export function isStripeMissing(err: unknown): boolean {
  const e = err as { type?: string; code?: string; statusCode?: number } | null;
  return e?.type === 'StripeInvalidRequestError' && (e.code === 'resource_missing' || e.statusCode === 404);
}

/** Stripe refused the request itself (4xx): our state disagrees with Stripe's, not a transient failure. */
export function isStripeRefusal(err: unknown): boolean {
  const e = err as { type?: string } | null;
  return e?.type === 'StripeInvalidRequestError';
}

/** How long a caller waits before asking again when Stripe failed (the SDK has already retried twice by then). */
const STRIPE_RETRY_AFTER_SEC = 5;

/** Stripe could not be reached or failed (network, 5xx, rate limit): the caller may retry, after Retry-After as for every 503. */
export function stripeUnavailable(err: unknown): ApiError {
  const e = err as { type?: string; message?: string } | null;
  return new ApiError(
    'UNAVAILABLE',
    'The payment provider did not answer; try again shortly',
    { provider: 'stripe', reason: e?.type ?? 'error' },
    { 'Retry-After': String(STRIPE_RETRY_AFTER_SEC) },
  );
}

/** Runs a Stripe call, turning transport failures into 503 UNAVAILABLE; Stripe's own refusals pass through. */
export async function callStripe<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (isStripeRefusal(err) || err instanceof ApiError) throw err;
    throw stripeUnavailable(err);
  }
}

/**
 * Stripe refused what a caller asked for (a checkout, a portal session, a tier change, a cancellation): the caller's
 * 422 INVALID_STATE with Stripe's reason, never a 500. `what` names the request ("the checkout").
 */
export function stripeRefused(what: string, err: unknown): ApiError {
  const e = err as { message?: string; code?: string } | null;
  return new ApiError('INVALID_STATE', `Stripe refused ${what}: ${e?.message ?? 'no reason given'}`, e?.code ? { provider: 'stripe', code: e.code } : {});
}

/** callStripe for a request a caller made: a refusal is their 422 (stripeRefused), a transport failure 503. */
export async function askStripe<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await callStripe(fn);
  } catch (err) {
    throw isStripeRefusal(err) ? stripeRefused(what, err) : err;
  }
}
