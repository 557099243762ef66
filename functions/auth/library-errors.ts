import { APIError } from '@better-auth/core/error';

/**
 * The 429 our hooks inside the auth library's endpoints answer (invitations, organization creations), in the
 * library's JSON shape with the contract's code RATE_LIMITED and `Retry-After`; `details` adds the limit's own fields.
 */
export function libraryRateLimited(message: string, retryAfterSec: number, details: Record<string, unknown> = {}): APIError {
  return new APIError('TOO_MANY_REQUESTS', { code: 'RATE_LIMITED', message, retryAfterSec, ...details }, { 'Retry-After': String(retryAfterSec) });
}
