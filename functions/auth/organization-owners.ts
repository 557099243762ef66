import { APIError } from '@better-auth/core/error';
import { pgCode, pgConstraint } from '../http/errors.ts';

/**
 * The refusal of the database rule `organization_keeps_an_owner` (migration 20261127000800): a member's removal, or a
 * change of their role, that would leave their organization with no owner. The plugin counts the owners first and
 * refuses the lone owner itself; two owners leaving (or removing each other, or demoting themselves) at once both
 * passed its count, and the database refuses the later one. It is answered as the plugin answers the lone owner, so
 * its clients need to know nothing new: 400 YOU_CANNOT_LEAVE_THE_ORGANIZATION_AS_THE_ONLY_OWNER for leave and
 * remove-member, 400 YOU_CANNOT_LEAVE_THE_ORGANIZATION_WITHOUT_AN_OWNER for update-member-role (the trigger marks a
 * role change with the detail `role change`). Mapped in the library's error hook (better-auth.ts, onAPIError): only
 * the library's endpoints write members (no route of ours does).
 */
export function isOrganizationOwnerRefusal(error: unknown): boolean {
  return pgCode(error) === '23514' && pgConstraint(error) === 'organization_keeps_an_owner';
}

export function organizationOwnerRefused(error: unknown): APIError {
  const detail = (error as { detail?: unknown } | null)?.detail;
  if (detail === 'role change') {
    return new APIError('BAD_REQUEST', {
      code: 'YOU_CANNOT_LEAVE_THE_ORGANIZATION_WITHOUT_AN_OWNER',
      message: 'You cannot leave the organization without an owner',
    });
  }
  return new APIError('BAD_REQUEST', {
    code: 'YOU_CANNOT_LEAVE_THE_ORGANIZATION_AS_THE_ONLY_OWNER',
    message: 'You cannot leave the organization as the only owner',
  });
}
