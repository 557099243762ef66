import type { AroundUserRemoval } from '../auth/index.ts';
import type { BillingDeps } from './billing-deps.ts';
import { rows, sql } from '../platform/db.ts';
import { callStripe, isStripeMissing } from './payments.ts';

/**
 * Billing's part of removing a user (the auth library's POST /api/auth/admin/remove-user, open to platform admins).
 * The user's rows go with the user (on delete cascade), but Stripe knew nothing of it: a paid subscription renewed
 * and charged every period for an account that no longer existed, and every event about it answered 500 (found by a
 * review). Nobody can use a removed user's subscription, so each live paid one is canceled at Stripe at once.
 *
 * No refund is made: the periods paid for were served up to the removal, and a removal is an admin's decision, for
 * abuse as much as at the user's own request, so whether the unused rest of a period is owed is theirs to decide in
 * Stripe's Dashboard, where the payments stay. Nothing is charged after the removal. A cancel that fails is logged
 * and does not undo the removal (as a ban's); the webhook then meets the subscription still live with its user gone
 * and refunds and cancels it (subscription-state.ts, endPurchaseOfRemovedUser), as it does a checkout the user opened
 * before the removal and paid after it.
 */

/** The user's subscriptions that Stripe may still charge: written, paid (a Stripe subscription), not ended. */
export async function chargeableSubscriptionsOf(deps: BillingDeps, userId: string): Promise<string[]> {
  const found = await rows<{ id: string }>(
    deps.database.db,
    sql`select stripe_subscription_id as id from public.subscriptions
         where user_id = ${userId} and stripe_subscription_id is not null and status <> 'canceled'`,
  );
  return found.map((r) => r.id);
}

/** Cancels the given Stripe subscriptions of a removed user now. Failures are logged, not thrown: the removal stands. */
export async function cancelSubscriptionsOfRemovedUser(
  deps: BillingDeps,
  userId: string,
  stripeSubscriptionIds: string[],
): Promise<{ canceled: string[]; failed: string[] }> {
  const canceled: string[] = [];
  const failed: string[] = [];
  for (const id of stripeSubscriptionIds) {
    try {
      if (!deps.payments) throw new Error('Stripe is not configured (STRIPE_SECRET_KEY)');
      const { stripe } = deps.payments;
      await callStripe(() => stripe.subscriptions.cancel(id));
      canceled.push(id);
    } catch (err) {
      // canceled meanwhile, or unknown to Stripe: nothing left to charge
      if (isStripeMissing(err)) continue;
      deps.logger.error('could not cancel a subscription of a removed user', { userId, stripeSubscriptionId: id, err });
      failed.push(id);
    }
  }
  if (canceled.length) deps.logger.warn('paid subscriptions of a removed user canceled', { userId, canceled });
  return { canceled, failed };
}

/**
 * Billing's part of removing a user (auth/mount.ts AroundUserRemoval, wired by app.ts): the user's chargeable
 * subscriptions are noted first (their rows go with the user), the library answers, and only when it removed the user
 * are they canceled: a refused removal (not an admin, a bad origin, an unknown user) changes nothing at Stripe.
 */
export const cancelSubscriptionsOnUserRemoval: AroundUserRemoval = async (deps, userId, remove) => {
  const chargeable = await chargeableSubscriptionsOf(deps, userId);
  if (await remove()) {
    if (chargeable.length > 0) await cancelSubscriptionsOfRemovedUser(deps, userId, chargeable);
  }
};
