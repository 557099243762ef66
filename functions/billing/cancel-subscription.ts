import type { BillingDeps } from './billing-deps.ts';
import type { OnUserBanned } from '../auth/index.ts';
import { takeBillingAllowance, type Asker } from './allowances.ts';
import { notFound } from '../http/errors.ts';
import { first, sql } from '../platform/db.ts';
import { callStripe, isStripeRefusal, requirePayments, stripeRefused } from './payments.ts';
import { billingSubscription, liveSubscription, liveSubscriptionsOf, type BillingSubscription } from './subscription-queries.ts';
import { endsWithItsPeriod, readStripeSubscription, readToApply, stateOf, syncStripeSubscription } from './subscription-state.ts';
import { grantsAccess, type SubscriptionDto } from './subscriptions.ts';
import { invalidState } from './tiers.ts';

/**
 * Cancellation. A paid subscription is canceled at Stripe (at period end by default, or now) and its local row
 * follows from Stripe's state through the same sync as the webhook. A free subscription has nothing to bill
 * and no period to honour, so it ends now whichever way it is canceled (docs/billing.md).
 */

export async function cancelSubscription(deps: BillingDeps, subscriptionId: string, immediate: boolean): Promise<SubscriptionDto> {
  const sub = await billingSubscription(deps, subscriptionId);
  if (!sub) throw notFound('Subscription', { subscriptionId });
  return cancel(deps, sub, immediate);
}

/**
 * The signed-in user's own cancel: paid tiers at period end, free tiers now, a paid one that grants nothing now. 404
 * when there is none. A paid one reaches Stripe every time (a repeat re-reads the subscription, so the answer says what Stripe says), so it takes the
 * asker's daily allowance of cancels (allowances.ts): one subscriber sent Stripe a request per call, as fast as it
 * liked, under the marketplace's one Stripe account (found by a review).
 */
export async function cancelMySubscription(deps: BillingDeps, asker: Asker, agentId: string): Promise<SubscriptionDto> {
  const sub = await liveSubscription(deps, asker.userId, agentId);
  // A paid subscription that grants nothing (`incomplete`: its first payment pending, or its renewal's retries ran
  // out) ends now: there is no period to honour, and Stripe would go on invoicing it. Before, it answered 404, and a
  // purchase made signed out under a Stripe customer of its own (one the user's billing portal does not open) could
  // be neither paid nor ended by its owner, nor bought again (found by review 45).
  if (!sub || (!grantsAccess(sub.status) && !sub.stripeSubscriptionId)) throw notFound('Active subscription', { agentId });
  if (sub.stripeSubscriptionId) await takeBillingAllowance(deps, asker, 'cancel');
  return cancel(deps, sub, 'unless served');
}

/**
 * Used when an admin bans a user with `cancelSubscriptions`: every live subscription is canceled at period end
 * (free ones now). Each is tried; failures are logged and reported, not thrown, so the ban itself stands.
 */
export async function cancelSubscriptionsAtPeriodEnd(deps: BillingDeps, userId: string): Promise<{ canceled: string[]; failed: string[] }> {
  const canceled: string[] = [];
  const failed: string[] = [];
  for (const sub of await liveSubscriptionsOf(deps, userId)) {
    try {
      await cancel(deps, sub, false);
      canceled.push(sub.id);
    } catch (err) {
      deps.logger.error('could not cancel a subscription of a banned user', { userId, subscriptionId: sub.id, err });
      failed.push(sub.id);
    }
  }
  return { canceled, failed };
}

/**
 * The background round's cancel of a deleted agent's subscription (deleted-agents.ts): the same cancel, except that it
 * leaves the round's mark, by which the round resumes the renewal if the agent comes back.
 */
export async function cancelForDeletedAgent(deps: BillingDeps, subscriptionId: string, immediate: boolean): Promise<void> {
  const sub = await billingSubscription(deps, subscriptionId);
  if (!sub) throw notFound('Subscription', { subscriptionId });
  await cancel(deps, sub, immediate, true);
}

/**
 * `immediate`: true ends it now, false at period end; 'unless served' (the user's own cancel) at period end when
 * Stripe's state grants access, else now. Judged from Stripe's state read here, not from the row: a first payment
 * that went through at Stripe, its events still on their way, left the row `incomplete`, and the user's cancel ended
 * at once, with nothing refunded, the period they had just paid for (review 65).
 */
async function cancel(
  deps: BillingDeps,
  sub: BillingSubscription,
  immediate: boolean | 'unless served',
  byDeletedAgentRound = false,
): Promise<SubscriptionDto> {
  if (sub.status === 'canceled') throw invalidState('The subscription is already canceled');
  if (!sub.stripeSubscriptionId) {
    const now = deps.clock.now();
    // Still free when written: a paid checkout's webhook converts the free row in place, and ending the row it had
    // just made paid would leave the user charged by Stripe for a subscription canceled here.
    const ended = await first(
      deps.database.db,
      sql`update public.subscriptions
             set status = 'canceled', canceled_at = ${now}, cancel_at_period_end = false,
                 pending_tier_id = null, pending_change_kind = null, updated_at = ${now}
           where id = ${sub.id} and status <> 'canceled' and stripe_subscription_id is null
          returning id`,
    );
    const current = (await billingSubscription(deps, sub.id))!;
    if (!ended && current.stripeSubscriptionId && current.status !== 'canceled') return cancel(deps, current, immediate);
    return current.dto;
  }

  const { stripe } = requirePayments(deps);
  const stripeSubscriptionId = sub.stripeSubscriptionId;
  // A cancel by the user, an admin or a ban is theirs from now on, also of a subscription a deleted agent's round had
  // set to end or is renewing: the round's mark and resume claim go before Stripe is asked, so a restore does not renew
  // it again (review 09), and a resume under way puts this cancel back after its own call (deleted-agents.ts; review
  // 10). Whether Stripe must be asked is judged from Stripe's state read after that, not from the row read before it:
  // a resume finishing in between left the row saying "ending" while Stripe renewed, and the cancel answered 200 with
  // nothing asked (review 13).
  if (!byDeletedAgentRound) await dropDeletedAgentMark(deps, sub.id);
  try {
    const judged = immediate === 'unless served' ? await readToApply(deps, stripeSubscriptionId) : undefined;
    if (immediate === true || (judged && !grantsAccess(stateOf(judged).status))) {
      await callStripe(() => stripe.subscriptions.cancel(stripeSubscriptionId));
    } else {
      const current = judged?.subscription ?? (await readStripeSubscription(deps, stripeSubscriptionId));
      if (!endsWithItsPeriod(current)) {
        // Stripe refuses to change the cancellation of a subscription a schedule manages: a pending downgrade
        // is dropped first (the subscription ends, so it would never take effect).
        const scheduleId = typeof current.schedule === 'string' ? current.schedule : current.schedule?.id;
        if (scheduleId && (typeof current.schedule !== 'object' || current.schedule?.status === 'active')) {
          await callStripe(() => stripe.subscriptionSchedules.release(scheduleId));
        }
        await callStripe(() => stripe.subscriptions.update(stripeSubscriptionId, { cancel_at_period_end: true }));
      }
    }
  } catch (err) {
    if (!isStripeRefusal(err)) throw err;
    await syncStripeSubscription(deps, stripeSubscriptionId);
    throw stripeRefused('the cancellation', err);
  }
  await syncStripeSubscription(deps, stripeSubscriptionId);
  // and again: a round ending it meanwhile (the row not ending yet when it looked) marked it as its own
  if (!byDeletedAgentRound) await dropDeletedAgentMark(deps, sub.id);
  return (await billingSubscription(deps, sub.id))!.dto;
}

/**
 * Clears a deleted agent's round's mark and resume claim (deleted-agents.ts); a claim cleared leaves the mark that a
 * cancel came while a round resumed the renewal, so the rounds ask Stripe for this cancel again until it has it
 * (migration 20261127001900).
 */
async function dropDeletedAgentMark(deps: BillingDeps, subscriptionId: string): Promise<void> {
  await sql`update public.subscriptions
               set agent_deleted_mailed_at = null, agent_resume_claimed_at = null,
                   agent_resume_canceled_at = case when agent_resume_claimed_at is not null then ${deps.clock.now()}
                                                   else agent_resume_canceled_at end
             where id = ${subscriptionId} and (agent_deleted_mailed_at is not null or agent_resume_claimed_at is not null)`.execute(
    deps.database.db,
  );
}

/** Billing's part of a ban (auth/ban-user.ts OnUserBanned): the subscriptions end at period end when asked. */
export const cancelSubscriptionsOnBan: OnUserBanned = async (deps, ban) => {
  if (ban.cancelSubscriptions) await cancelSubscriptionsAtPeriodEnd(deps, ban.userId);
};
