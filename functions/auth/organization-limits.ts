import { libraryRateLimited } from './library-errors.ts';
import type { Clock } from '../platform/clock.ts';
import { first, sql, type Database } from '../platform/db.ts';
import { takeToken } from '../platform/rate-limits.ts';

/**
 * How many organizations one account may make. Any signed-in account may create organizations, each a row in the
 * shared database with its owner's membership, and the library sets no limit by default: one account scripted
 * creations without end (an identity review's note). Two bounds, both per account:
 *   * ORGANIZATIONS_PER_DAY creations in any 24 hours, counted in PostgreSQL (public.rate_limits, the count and the
 *     check in one statement), so creations sent all at once, from several instances, stop at the limit too, and
 *     deleting an organization gives no creation back (429 RATE_LIMITED with Retry-After);
 *   * OWNED_ORGANIZATIONS organizations owned at once (403, the library's
 *     YOU_HAVE_REACHED_THE_MAXIMUM_NUMBER_OF_ORGANIZATIONS). The library counts it before its create hook, without a
 *     lock, so concurrent creations may pass it together; the daily count above bounds by how many.
 * Memberships by invitation count toward neither: an account invited to many organizations may still make its own.
 */
export const ORGANIZATIONS_PER_DAY = 10;
export const OWNED_ORGANIZATIONS = 50;
const DAY_MS = 24 * 60 * 60 * 1000;

/** The organization plugin's `organizationLimit`: true when the account already owns the most it may. */
export async function ownsMostOrganizations(database: Database, user: { id: string }): Promise<boolean> {
  const row = await first<{ owned: number }>(
    database.db,
    sql`select count(*)::int as owned from member where "userId" = ${user.id} and 'owner' = any (string_to_array(role, ','))`,
  );
  return (row?.owned ?? 0) >= OWNED_ORGANIZATIONS;
}

/** The plugin's beforeCreateOrganization hook: takes one of the account's creations of the day, or refuses. */
export async function takeOrganizationCreation(deps: { database: Database; clock: Clock }, user: { id: string }): Promise<void> {
  const verdict = await takeToken(deps, `organization-create|${user.id}`, ORGANIZATIONS_PER_DAY, DAY_MS);
  if (verdict.allowed) return;
  throw libraryRateLimited(`You can create ${ORGANIZATIONS_PER_DAY} organizations a day; try again later`, verdict.retryAfterSec, {
    limitPerDay: ORGANIZATIONS_PER_DAY,
  });
}
