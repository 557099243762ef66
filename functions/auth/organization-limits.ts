import { AsyncLocalStorage } from 'node:async_hooks';
import { libraryRateLimited } from './library-errors.ts';
import type { Clock } from '../platform/clock.ts';
import { first, sql, type Database } from '../platform/db.ts';
import { takeUserAndAddressAllowance, userAndAddressAllowance } from '../platform/rate-limits.ts';

/**
 * How many organizations one account, and one address, may make. Any signed-in account may create organizations, each
 * a row in the shared database with its owner's membership, and the library sets no limit by default: one account
 * scripted creations without end (an identity review's note). Three bounds:
 *   * ORGANIZATIONS_PER_DAY creations per account in a day that opens with the first, counted in PostgreSQL
 *     (public.rate_limits, the count and the check in one statement), so creations sent all at once, from several
 *     instances, stop at the limit too, and deleting an organization gives no creation back (429 RATE_LIMITED with
 *     Retry-After);
 *   * ORGANIZATIONS_PER_ADDRESS_PER_DAY creations per client address (an IPv6 client's /64), all its accounts
 *     together, counted the same way: accounts cost nothing (sign-up needs no verified address), and four throwaway
 *     accounts from one address made 40 (review 33). Three times the per-account figure, for an office or a household
 *     behind one address. Both or neither are taken (platform/rate-limits.ts `takeUserAndAddressAllowance`). The
 *     library's routes take only the user's own session, so every creation over HTTP is counted per address;
 *   * OWNED_ORGANIZATIONS organizations owned at once (403, the library's
 *     YOU_HAVE_REACHED_THE_MAXIMUM_NUMBER_OF_ORGANIZATIONS). The library counts it before its create hook, without a
 *     lock, so concurrent creations may pass it together; the daily counts above bound by how many.
 * Memberships by invitation count toward none: an account invited to many organizations may still make its own.
 */
export const ORGANIZATIONS_PER_DAY = 10;
export const ORGANIZATIONS_PER_ADDRESS_PER_DAY = 30;
export const OWNED_ORGANIZATIONS = 50;

const creations = userAndAddressAllowance('organization-create', 'create an organization', ORGANIZATIONS_PER_DAY, ORGANIZATIONS_PER_ADDRESS_PER_DAY);

/**
 * The client address of the creation the library is answering. The plugin's hook is given the user and the
 * organization, not the request, and the library never sees the socket peer anyway; so mount.ts answers
 * POST /api/auth/organization/create inside `creatingFrom` with the address as http/rate-limit.ts `clientSubject`
 * tells it. A creation outside a request (the library's API called by the service itself) has none.
 */
const creationAddress = new AsyncLocalStorage<string>();

/** Runs `answer` (the library answering a creation) with the request's client address known to the hook below. */
export function creatingFrom<T>(address: string, answer: () => Promise<T>): Promise<T> {
  return creationAddress.run(address, answer);
}

/** The organization plugin's `organizationLimit`: true when the account already owns the most it may. */
export async function ownsMostOrganizations(database: Database, user: { id: string }): Promise<boolean> {
  const row = await first<{ owned: number }>(
    database.db,
    sql`select count(*)::int as owned from member where "userId" = ${user.id} and 'owner' = any (string_to_array(role, ','))`,
  );
  return (row?.owned ?? 0) >= OWNED_ORGANIZATIONS;
}

/**
 * The plugin's beforeCreateOrganization hook: takes one of the account's creations of the day and one of its client
 * address's, or refuses (taking neither).
 */
export async function takeOrganizationCreation(deps: { database: Database; clock: Clock }, user: { id: string }): Promise<void> {
  const asker = { userId: user.id, address: creationAddress.getStore() };
  const refused = await takeUserAndAddressAllowance(deps, asker, creations, `organization-create|${user.id}`);
  if (refused) throw libraryRateLimited(refused.message, refused.retryAfterSec, { limitPerDay: refused.limitPerDay });
}
