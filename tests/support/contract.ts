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

export interface ContractOperation {
  operationId: string;
  method: string;
  /** OpenAPI form, e.g. `/agents/{agentId}`. */
  path: string;
  /** The access column (`public`, `user`, `admin`, `bearer`, `author or admin`, ...); `admin` for /admin/* tables without one. */
  access: string;
}

/**
 * The operations of the contract's tables with their method and path: the first cell names one or more
 * operationIds (`listCapabilities / addCapability`), the second their methods and paths, in the same order
 * (`GET, POST /agents/{agentId}/capabilities`, `GET /tags (paginated), POST /tags, DELETE /tags/{tagId}`).
 */
export function parseOperations(text: string): ContractOperation[] {
  const out: ContractOperation[] = [];
  for (const line of text.split('\n')) {
    // a `|` inside backticks (`month|year`) is not a cell border
    const cells = line.replace(/`[^`]*`/g, (quoted) => quoted.replace(/\|/g, ' or ')).split('|').map((c) => c.trim());
    const ids = /^[a-z][A-Za-z]+(?:\s*\/\s*[a-z][A-Za-z]+)*$/.test(cells[1] ?? '') ? cells[1]!.split('/').map((s) => s.trim()) : [];
    if (!ids.length || !/^`?(GET|POST|PUT|PATCH|DELETE)\b/.test(cells[2] ?? '')) continue;
    const spec = cells[2]!
      .replace(/`/g, '')
      .replace(/\{ [^}]*\}/g, '') // request bodies `{ slug, name, ... }` (path parameters have no space)
      .replace(/\s+->.*$/, '')
      .replace(/\([^)]*\)/g, '') // remarks
      .replace(/\?[^\s,]*/g, '') // query strings
      .replace(/\*/g, '');
    const methods: Array<{ method: string; path?: string }> = spec.split(',').map((part) => {
      const [method, path] = part.trim().split(/\s+/);
      return { method: method!, ...(path ? { path } : {}) };
    });
    // `GET, POST /path`: a method without a path takes the next one's
    for (let i = methods.length - 2; i >= 0; i--) methods[i]!.path ??= methods[i + 1]!.path;
    if (methods.length !== ids.length || methods.some((m) => !/^(GET|POST|PUT|PATCH|DELETE)$/.test(m.method) || !m.path?.startsWith('/'))) {
      throw new Error(`contract.md: cannot read the operations of ${JSON.stringify(line)}`);
    }
    // access: `public / admin` pairs with `listX / addX`; one value applies to all; the admin tables have no column
    const accessCell = (cells[3] ?? '').replace(/`/g, '');
    const perId = accessCell.split(';')[0]!.split(' / ').map((a) => a.trim());
    const accessOf = (i: number, path: string) =>
      accessCell ? (perId.length === ids.length ? perId[i]! : perId[0]!) : path.startsWith('/admin/') ? 'admin' : 'unknown';
    ids.forEach((operationId, i) => out.push({ operationId, method: methods[i]!.method, path: methods[i]!.path!, access: accessOf(i, methods[i]!.path!) }));
  }
  return out;
}
