import type { Context, Next } from 'hono';
import type { AppEnv } from '../platform/app-types.ts';
import { ApiError } from '../http/errors.ts';
import { rateLimited, refundToken, takeToken } from '../http/rate-limit.ts';
import { isJsonMediaType } from '../http/text-guard.ts';
import { sha256Hex } from './recipient-allowance.ts';

/**
 * Failed sign-ins per account (contract.md, Trust boundaries): at most AUTH_FAILED_SIGNINS_PER_ACCOUNT (default 10;
 * 0 disables) failed password sign-ins per account in 15 minutes; past that, every sign-in of that account answers
 * 429 RATE_LIMITED with Retry-After until the window ends, from any address and with the right password too, so
 * rotating addresses buys an attacker nothing.
 *
 * Counted in PostgreSQL (public.rate_limits, the same table and statement as the per-address limits), so the count
 * holds across instances, under the key `signin-failures|<SHA-256 of the lower-cased email>`: unknown addresses
 * count alike (nothing tells them apart) and the table holds no email address.
 *
 * The attempt takes its slot before the library checks the password, and gives it back when the answer was not
 * 401 INVALID_EMAIL_OR_PASSWORD: so concurrent guesses cannot overrun the limit while the first ones are checked.
 *
 * A sign-in is JSON only (415 otherwise): the library also reads form bodies, which this count did not, so guesses
 * sent form-encoded from rotating addresses met no per-account limit at all (found by a review).
 */

const WINDOW_MS = 15 * 60_000;

export function limitFailedSignIns() {
  return async (c: Context<AppEnv>, next: Next) => {
    if (!isJsonMediaType(c.req.header('content-type'))) {
      throw new ApiError('UNSUPPORTED_MEDIA_TYPE', 'Send the sign-in as application/json: { email, password }');
    }
    const email = c.var.deps.config.authFailedSigninsPerAccount > 0 ? await signInEmail(c.req.raw) : undefined;
    if (email === undefined) return next();
    await countPasswordCheck(c, next, email, (res) => isLibraryError(res, 401, 'INVALID_EMAIL_OR_PASSWORD'));
  };
}

/**
 * The other password check a caller can repeat over HTTP: change-password's `currentPassword` (400 INVALID_PASSWORD
 * when wrong). It counts against the same allowance as the account's failed sign-ins: whoever holds a stolen or
 * left-behind session guessed the password without limit there, then changed it, and the change ended every one of
 * the owner's sessions (found by a review). (verify-password, the library's bare oracle, is closed: better-auth.ts.)
 */
export function limitFailedPasswordChanges() {
  return async (c: Context<AppEnv>, next: Next) => {
    const deps = c.var.deps;
    if (deps.config.authFailedSigninsPerAccount <= 0) return next();
    const session = await deps.auth.api.getSession({ headers: c.req.raw.headers }).catch(() => null);
    if (!session) return next(); // the library answers its own 401
    await countPasswordCheck(c, next, session.user.email, (res) => isLibraryError(res, 400, 'INVALID_PASSWORD'));
  };
}

/**
 * One password check of the account with this email: it takes its slot before the library checks the password (so
 * concurrent guesses cannot overrun the limit while the first ones are checked) and gives it back unless `failed`.
 */
async function countPasswordCheck(c: Context<AppEnv>, next: Next, email: string, failed: (res: Response) => Promise<boolean>) {
  const deps = c.var.deps;
  const limit = deps.config.authFailedSigninsPerAccount;
  const key = `signin-failures|${await sha256Hex(email.toLowerCase())}`;
  const verdict = await takeToken(deps, key, limit, WINDOW_MS);
  if (!verdict.allowed) {
    throw rateLimited(verdict.retryAfterSec, 'Too many failed password attempts for this account; try again later', {
      failedSignInsPer15Minutes: limit,
    });
  }
  await next();
  if (!(await failed(c.res))) await refundToken(deps, key);
}

/**
 * The email of a sign-in request, or undefined when the body has none (the library answers its own 400). Also read
 * by sign-in-password-stands.ts. (At most 320 characters: no account has a longer one, library-input.ts.)
 */
export async function signInEmail(request: Request): Promise<string | undefined> {
  try {
    const body = (await request.clone().json()) as { email?: unknown } | null;
    return typeof body?.email === 'string' && body.email.length > 0 && body.email.length <= 320 ? body.email : undefined;
  } catch {
    return undefined;
  }
}

async function isLibraryError(response: Response, status: number, code: string): Promise<boolean> {
  if (response.status !== status) return false;
  try {
    const body = (await response.clone().json()) as { code?: unknown } | null;
    return body?.code === code;
  } catch {
    return false;
  }
}
