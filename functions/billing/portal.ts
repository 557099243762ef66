import type { BillingDeps } from './billing-deps.ts';
import { takeBillingAllowance, type Asker } from './allowances.ts';
import { ApiError, notFound } from '../http/errors.ts';
import { ownUrl } from './checkout.ts';
import { customerIdOf, forgetIfMissing, withLiveCustomer } from './customers.ts';
import { askStripe, requirePayments } from './payments.ts';
import { portalConfiguration } from './portal-configuration.ts';
import { liveSubscription } from './subscription-queries.ts';
import { syncStripeSubscription } from './subscription-state.ts';
import { grantsAccess } from './subscriptions.ts';
import { invalidState } from './tiers.ts';
import { pagesOrigin } from '../platform/config.ts';

/**
 * Stripe's customer portal for the signed-in user: `overview` lands on the portal's home (invoices, cards, all
 * subscriptions); `cancel` deep-links to cancelling the user's subscription to one agent. Both open with the
 * marketplace's own portal configuration (no plan switching: portal-configuration.ts).
 */
export async function createPortalSession(
  deps: BillingDeps,
  asker: Asker,
  input: { flow: 'overview' | 'cancel'; agentId?: string | undefined; returnUrl?: string | undefined },
): Promise<{ url: string }> {
  const { userId } = asker;
  const { stripe } = requirePayments(deps);
  const origin = pagesOrigin(deps.config);
  const returnUrl = ownUrl(deps, input.returnUrl, 'returnUrl') ?? `${origin}/account/billing`;

  if (input.flow === 'cancel') {
    if (!input.agentId) {
      throw new ApiError('VALIDATION_ERROR', 'The request is not valid', {
        issues: [{ path: 'agentId', message: 'required when flow is cancel' }],
      });
    }
    const sub = await liveSubscription(deps, userId, input.agentId);
    if (!sub || !grantsAccess(sub.status)) throw notFound('Active subscription', { agentId: input.agentId });
    if (!sub.stripeSubscriptionId || !sub.stripeCustomerId) {
      throw invalidState('This subscription is on a free tier: cancel it with POST /me/subscriptions/{agentId}/cancel');
    }
    if (sub.cancelAtPeriodEnd) {
      throw invalidState('This subscription already ends at the end of its period: there is nothing left to cancel', {
        agentId: input.agentId,
      });
    }
    await takeBillingAllowance(deps, asker, 'portal');
    const session = await askStripe('the portal session', async () => {
      try {
        return await stripe.billingPortal.sessions.create({
          customer: sub.stripeCustomerId!,
          configuration: await portalConfiguration(stripe),
          return_url: returnUrl,
          flow_data: {
            type: 'subscription_cancel',
            subscription_cancel: { subscription: sub.stripeSubscriptionId! },
            after_completion: { type: 'redirect', redirect: { return_url: returnUrl } },
          },
        });
      } catch (err) {
        // The customer was deleted at Stripe (its events not here yet), and with it this subscription: the link is
        // marked and the row reads Stripe's state, as the events would (review 85: Stripe's "No such customer" as a 422).
        if (!(await forgetIfMissing(deps, sub.stripeCustomerId!, err))) throw err;
        await syncStripeSubscription(deps, sub.stripeSubscriptionId!).catch((readErr: unknown) => {
          deps.logger.warn('portal: the subscription of a deleted customer could not be read back; its events will', { err: readErr });
        });
        throw notFound('Active subscription', { agentId: input.agentId });
      }
    });
    return { url: session.url };
  }

  const customer = await customerIdOf(deps, userId);
  const noAccount = () => invalidState('There is no billing account yet: the portal opens after a first paid checkout');
  if (!customer) throw noAccount();
  await takeBillingAllowance(deps, asker, 'portal');
  // Deleted at Stripe, its customer.deleted event not here yet: the same answer as once it is. Forgetting it may have
  // moved the link to the customer of another subscription the user still pays for: the portal opens on that.
  const session = await askStripe('the portal session', () =>
    withLiveCustomer(
      deps,
      () => customerIdOf(deps, userId),
      async (customerId) =>
        stripe.billingPortal.sessions.create({ customer: customerId, configuration: await portalConfiguration(stripe), return_url: returnUrl }),
      noAccount,
    ),
  );
  return { url: session.url };
}
