import { describe, expect, it } from 'vitest';
import { CONTRACT_STRIPE_EVENTS, contractText, parseStripeEvents } from '../support/contract.ts';

/**
 * The contract's lists that tests iterate over (tests/support/contract.ts) are the contract's: where
 * shared/spec/contract.md sits beside the repository (CI, the development machines), they are compared with it.
 * Elsewhere there is nothing to compare with, and the test says so by passing on the written list alone.
 */
describe('lists taken from contract.md', () => {
  const text = contractText();

  it('the Stripe event types the webhook handles are those under "Webhook (inbound, Stripe)"', () => {
    expect(new Set(CONTRACT_STRIPE_EVENTS).size).toBe(CONTRACT_STRIPE_EVENTS.length);
    if (text === undefined) return;
    expect([...CONTRACT_STRIPE_EVENTS].sort()).toEqual(parseStripeEvents(text).sort());
  });
});
