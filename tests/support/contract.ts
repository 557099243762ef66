import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Lists the contract fixes (shared/spec/contract.md), for tests that must cover all of them. The lists are
 * written here so the suite runs from any checkout; where the contract sits beside the repository (`../shared`, as
 * in CI and on the development machines) tests/foundation/contract-lists.once.test.ts parses it and fails on any
 * difference.
 */

/** contract.md, "Webhook (inbound, Stripe)", "Handled:". */
export const CONTRACT_STRIPE_EVENTS = [
  'checkout.session.completed',
  'customer.subscription.created',
  'customer.subscription.updated',
  'customer.subscription.deleted',
  'customer.subscription.pending_update_applied',
  'customer.subscription.pending_update_expired',
  'invoice.paid',
  'invoice.payment_succeeded',
  'invoice.payment_failed',
  'invoice.voided',
  'subscription_schedule.updated',
  'subscription_schedule.released',
  'subscription_schedule.completed',
  'subscription_schedule.canceled',
] as const;

const contractPath = join(import.meta.dirname, '..', '..', '..', 'shared', 'spec', 'contract.md');

/** The contract's text, or undefined when shared/ is not beside this checkout. */
export function contractText(): string | undefined {
  return existsSync(contractPath) ? readFileSync(contractPath, 'utf8') : undefined;
}

/** The handled Stripe event types as contract.md states them ("Handled: a, b.c|d, ..."). */
export function parseStripeEvents(text: string): string[] {
  const section = text.slice(text.indexOf('### Webhook (inbound, Stripe)'));
  const handled = /Handled:([\s\S]*?);/.exec(section)?.[1];
  if (!handled) throw new Error('contract.md: no "Handled:" list under "Webhook (inbound, Stripe)"');
  return [...handled.matchAll(/`([^`]+)`/g)].flatMap(([, spec]) => {
    // `customer.subscription.created|updated|deleted` names three types that share the prefix
    const [head, ...alternatives] = spec!.split('|');
    const prefix = head!.slice(0, head!.lastIndexOf('.') + 1);
    return [head!, ...alternatives.map((a) => prefix + a)];
  });
}

/** The operationIds of the contract's operation tables (first column; `a / b` names two). */
export function parseOperationIds(text: string): string[] {
  const ids: string[] = [];
  for (const line of text.split('\n')) {
    const cell = /^\|\s*([a-z][A-Za-z]+(?:\s*\/\s*[a-z][A-Za-z]+)*)\s*\|/.exec(line)?.[1];
    if (!cell || cell === 'operationId' || cell === 'variable' || cell === 'status' || cell === 'concern') continue;
    ids.push(...cell.split('/').map((s) => s.trim()));
  }
  return [...new Set(ids)];
}
