import { APIError } from '@better-auth/core/error';
import { isUniqueViolation, pgCode, pgConstraint } from '../http/errors.ts';

/**
 * The refusal of the unique index `member_one_per_account` (migration 20261127004100): a second membership of one
 * account in one organization. The organization plugin's accept-invitation never asks whether the account is already a
 * member, so an account holding two pending invitations (sent at once, or one sent while it was joining) accepted both
 * and held two rows; remove-member and update-member-role act on one, so a removed member stayed one and a demoted
 * admin kept the role through the other (review 24, finding 3). It is answered as the plugin answers inviting someone
 * already a member, 400 USER_IS_ALREADY_A_MEMBER_OF_THIS_ORGANIZATION, in the library's shape (mapped in its error
 * hook, better-auth.ts onAPIError: only the library's endpoints write members). The plugin puts the invitation back to
 * pending when the member's insert fails, so a refused acceptance uses nothing up.
 */
export function isSecondMembership(error: unknown): boolean {
  return isUniqueViolation(error) && pgConstraint(error) === 'member_one_per_account';
}

export function secondMembershipRefused(): APIError {
  return new APIError('BAD_REQUEST', {
    code: 'USER_IS_ALREADY_A_MEMBER_OF_THIS_ORGANIZATION',
    message: 'User is already a member of this organization',
  });
}

/**
 * The organization was deleted while a request on it ran: accept-invitation reads the organization, then inserts the
 * member, and invite-member then inserts the invitation; a delete in between failed that insert on its foreign key,
 * a 500 (review 82). Answered as the plugin answers an organization that is not there (the plugin puts the invitation
 * back to pending when the member's insert fails; the organization's delete then removes it with the rest).
 */
export function isOrganizationGone(error: unknown): boolean {
  const constraint = pgConstraint(error);
  return pgCode(error) === '23503' && (constraint === 'member_organizationId_fkey' || constraint === 'invitation_organizationId_fkey');
}

export function organizationGoneRefused(): APIError {
  return new APIError('BAD_REQUEST', { code: 'ORGANIZATION_NOT_FOUND', message: 'Organization not found' });
}

/**
 * The refusal of the database rule `organization_membership_limit` (migration 20261127006500): a join that would make an
 * organization's 101st member. The plugin counts the members and then inserts one, so invitees accepting at once all
 * passed its count (review 92). Answered as the plugin answers a full organization, in the library's shape.
 */
export function isMembershipLimitRefusal(error: unknown): boolean {
  return pgCode(error) === '23514' && pgConstraint(error) === 'organization_membership_limit';
}

export function membershipLimitRefused(): APIError {
  return new APIError('FORBIDDEN', { code: 'ORGANIZATION_MEMBERSHIP_LIMIT_REACHED', message: 'Organization membership limit reached' });
}

/**
 * The refusal of the database rule `organization_invitation_limit` (migration 20261127006800): an invitation that would
 * make an organization's 101st pending one. The plugin counts them and then inserts, so invitations sent at once all
 * passed its count. Answered as the plugin answers a full list of invitations, in the library's shape.
 */
export function isInvitationLimitRefusal(error: unknown): boolean {
  return pgCode(error) === '23514' && pgConstraint(error) === 'organization_invitation_limit';
}

export function invitationLimitRefused(): APIError {
  return new APIError('FORBIDDEN', { code: 'INVITATION_LIMIT_REACHED', message: 'Invitation limit reached' });
}
