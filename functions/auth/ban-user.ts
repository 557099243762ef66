import type { AppDeps } from '../platform/app-types.ts';
import { ApiError } from '../http/errors.ts';
import { first, sql } from '../platform/db.ts';
import { getUser } from './users.ts';

/**
 * Bans a user (POST /admin/users/{userId}/ban). One transaction: the user row is marked banned, and the
 * `user_banned_revoke_credentials` trigger (migration 20261122000200) deletes the user's sessions and OAuth
 * access/refresh tokens and puts `user:<id>` on the revocation list, so live JWT access tokens are refused on
 * their next request. The trigger, not this function, does that so the library's own /api/auth/admin/ban-user
 * and /admin/update-user bans have the same effect.
 */

export interface BanInput {
  /** The admin doing it (an admin cannot ban themselves). */
  actorId: string;
  userId: string;
  reason?: string | undefined;
  /** Also cancel the user's active subscriptions at period end (see `cancelSubscriptionsOnBan`). */
  cancelSubscriptions?: boolean | undefined;
}

/**
 * What other domains do when a user is banned (billing: cancel the user's subscriptions at period end when the
 * admin asked for it). Passed in where the app is composed (app.ts -> identityRoutes), so identity does not import
 * billing and nothing is wired by side effect; it runs after the ban committed, because cancelling a paid
 * subscription talks to Stripe.
 */
export type OnUserBanned = (deps: AppDeps, ban: { userId: string; cancelSubscriptions: boolean }) => Promise<void>;

export async function banUser(deps: AppDeps, input: BanInput, onUserBanned: OnUserBanned) {
  if (input.actorId === input.userId) throw new ApiError('FORBIDDEN', 'You cannot ban your own account');
  const db = deps.database.db;
  // Two admins banning each other at once both pass the check above; the database's rule refuses the later one
  // (trigger `user_keeps_a_platform_admin`: the last admin who is not banned stays so), 422 INVALID_STATE (app.ts).
  const updated = await first<{ id: string }>(
    db,
    sql`update "user" set banned = true, "banReason" = ${input.reason ?? null}, "banExpires" = null, "updatedAt" = ${deps.clock.now()}
         where id = ${input.userId}
     returning id`,
  );
  if (!updated) return getUser(db, input.userId); // 404
  deps.logger.info('user banned', { userId: input.userId, by: input.actorId, cancelSubscriptions: !!input.cancelSubscriptions });
  await onUserBanned(deps, { userId: input.userId, cancelSubscriptions: !!input.cancelSubscriptions });
  return getUser(db, input.userId);
}

/** Lifts a ban (POST /admin/users/{userId}/unban). Tokens issued before the ban stay revoked. */
export async function unbanUser(deps: AppDeps, input: { actorId: string; userId: string }) {
  const db = deps.database.db;
  await sql`update "user" set banned = false, "banReason" = null, "banExpires" = null, "updatedAt" = ${deps.clock.now()}
             where id = ${input.userId}`.execute(db);
  deps.logger.info('user unbanned', { userId: input.userId, by: input.actorId });
  return getUser(db, input.userId);
}
