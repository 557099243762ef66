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

/** Stripe could not be reached or failed (network, 5xx, rate limit): the caller may retry. */
export function stripeUnavailable(err: unknown): ApiError {
  const e = err as { type?: string; message?: string } | null;
  return new ApiError('UNAVAILABLE', 'The payment provider did not answer; try again shortly', { provider: 'stripe', reason: e?.type ?? 'error' });
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
