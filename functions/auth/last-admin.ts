import { ApiError, pgCode, pgConstraint } from '../http/errors.ts';

/**
 * The refusal of the database rule `platform_keeps_an_admin` (migration 20261127000400): a demotion, ban or removal
 * that would leave no platform admin who is not banned and can sign in. Every path answers it 422 INVALID_STATE: our
 * routes through the app's error mapping (app.ts, errorResponse: whatever route writes the row), the auth library's
 * endpoints through its error hook (better-auth.ts, onAPIError), which catches errors before the app sees them.
 */
export function isLastAdminRefusal(error: unknown): boolean {
  return pgCode(error) === '23514' && pgConstraint(error) === 'platform_keeps_an_admin';
}

export const lastAdminRefused = () =>
  new ApiError(
    'INVALID_STATE',
    'This would leave the marketplace without a platform admin who can act (another admin changed meanwhile)',
    { reason: 'last_platform_admin' },
  );
