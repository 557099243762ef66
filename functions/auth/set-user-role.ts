import type { AppDeps } from '../platform/app-types.ts';
import { ApiError } from '../http/errors.ts';
import { sql } from '../platform/db.ts';
import type { Role } from './better-auth.ts';
import { getUser } from './users.ts';

/**
 * Changes a user's role (PUT /admin/users/{userId}/role). An admin cannot demote their own account: the
 * platform could otherwise lose its last admin by accident. The library's /api/auth/admin/set-role and
 * /admin/update-user are guarded by the same rule (see `refuseSelfDemotion` in mount.ts).
 *
 * That check reads the role the request was authenticated with, so two admins demoting each other at once both
 * passed it. What holds is the database's rule (trigger `user_keeps_a_platform_admin`, migration 20261127000400):
 * no write leaves the marketplace without a usable admin; the later of the two is refused, 422 INVALID_STATE.
 */
export async function setUserRole(deps: AppDeps, input: { actorId: string; userId: string; role: Role }) {
  if (input.actorId === input.userId && input.role !== 'platform_admin') throw selfDemotion();
  const db = deps.database.db;
  await sql`update "user" set role = ${input.role}, "updatedAt" = ${deps.clock.now()} where id = ${input.userId}`.execute(db);
  deps.logger.info('user role set', { userId: input.userId, role: input.role, by: input.actorId });
  return getUser(db, input.userId);
}

export const selfDemotion = () => new ApiError('FORBIDDEN', 'You cannot remove the platform_admin role from your own account');

/** Whether a role value the library accepts (a string or a list) keeps platform_admin. */
export function keepsAdminRole(role: unknown): boolean {
  const list = Array.isArray(role) ? role : typeof role === 'string' ? role.split(',') : [];
  // Only a string names a role. String() of an array nested 10,000 deep ran out of stack (a 500 before any session
  // was read; review 23).
  return list.some((r) => typeof r === 'string' && r.trim() === 'platform_admin');
}
