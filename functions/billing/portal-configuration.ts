import type Stripe from 'stripe';
import { isStripeMissing } from './payments.ts';

/**
 * The customer portal configuration every portal session of the marketplace opens with, made by the service itself
 * instead of the Stripe account's default (review 125). In the portal, plan switching is money lost, not a feature:
 * a user upgrades there, Stripe bills the proration with the next renewal, the higher tier's quota applies at once
 * (the tier follows Stripe's price), and a cancel at period end means there is no next renewal, so the proration is
 * never billed. Tier changes go through the marketplace (admin tier changes, paid before they apply). So this
 * configuration turns off subscription updates (price, quantity, promotion codes) and pauses, and cancels at the
 * period's end as POST /me/subscriptions/{agentId}/cancel does; invoices, cards and the billing address stay.
 *
 * One configuration per Stripe account, marked in its metadata: an instance finds the one another made (or it made
 * before a restart) while it still keeps these features, else makes one. Someone changing it in the Dashboard to allow
 * plan switching, or deactivating it, makes it no longer used: the next portal session finds or makes another.
 */
const MARK = { key: 'agent_marketplace_portal', value: 'v1' } as const;

const FEATURES = {
  subscription_update: { enabled: false },
  subscription_pause: { enabled: false },
  subscription_cancel: { enabled: true, mode: 'at_period_end', proration_behavior: 'none' },
  payment_method_update: { enabled: true },
  invoice_history: { enabled: true },
  customer_update: { enabled: true, allowed_updates: ['address', 'phone', 'tax_id'] },
} satisfies Stripe.BillingPortal.ConfigurationCreateParams.Features;

/** Per Stripe client (per app): the configuration last used, and a search under way (one at a time). */
const remembered = new WeakMap<Stripe, string>();
const searching = new WeakMap<Stripe, Promise<string>>();

/**
 * The configuration's id for the next portal session. The one used last is read back first (one request), so a change
 * made in the Dashboard since, allowing plan switching or deactivating it, counts from the next session on.
 */
export async function portalConfiguration(stripe: Stripe): Promise<string> {
  const id = remembered.get(stripe);
  if (id) {
    const current = await stripe.billingPortal.configurations.retrieve(id).catch((err: unknown) => {
      if (isStripeMissing(err)) return undefined; // not in this account (configurations are never deleted)
      throw err;
    });
    if (current && usable(current)) return id;
  }
  let search = searching.get(stripe);
  if (!search) {
    search = findOrMake(stripe).finally(() => searching.delete(stripe));
    searching.set(stripe, search);
  }
  const found = await search;
  remembered.set(stripe, found);
  return found;
}

async function findOrMake(stripe: Stripe): Promise<string> {
  const passedOver: string[] = [];
  for await (const c of stripe.billingPortal.configurations.list({ limit: 100 })) {
    if (c.metadata?.[MARK.key] !== MARK.value) continue;
    if (usable(c)) return c.id;
    passedOver.push(c.id);
  }
  // Instances looking at once see the same configurations and ask with the same key: Stripe makes one and answers each
  // with it (idempotency, 24 hours; review 127 found two instances made two). Configurations are never deleted, only
  // deactivated, so one more passed over (changed in the Dashboard, deactivated) is a new count, and a new key: the
  // next one is made anew rather than answered from before.
  const made = await stripe.billingPortal.configurations.create(
    { features: FEATURES, metadata: { [MARK.key]: MARK.value } },
    { idempotencyKey: `${MARK.key}:${MARK.value}:after:${passedOver.length}` },
  );
  return made.id;
}

/** Active, ours, and still without plan switching or pauses, cancelling at the period's end. */
function usable(c: Stripe.BillingPortal.Configuration): boolean {
  const f = c.features;
  return (
    c.active &&
    c.metadata?.[MARK.key] === MARK.value &&
    !f.subscription_update.enabled &&
    !f.subscription_pause.enabled &&
    f.subscription_cancel.enabled &&
    f.subscription_cancel.mode === 'at_period_end'
  );
}
