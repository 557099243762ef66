import type { Context, Next } from 'hono';
import type { AppEnv } from '../platform/app-types.ts';
import { ApiError } from '../http/errors.ts';
import { rateLimited, refundToken, takeToken } from '../http/rate-limit.ts';
import { isJsonMediaType } from '../http/text-guard.ts';

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
    const deps = c.var.deps;
    const limit = deps.config.authFailedSigninsPerAccount;
    const email = limit > 0 ? await signInEmail(c.req.raw) : undefined;
    if (email === undefined) return next();
    const key = `signin-failures|${await sha256Hex(email.toLowerCase())}`;
    const verdict = await takeToken(deps, key, limit, WINDOW_MS);
    if (!verdict.allowed) {
      throw rateLimited(verdict.retryAfterSec, 'Too many failed sign-ins for this account; try again later', {
        failedSignInsPer15Minutes: limit,
      });
    }
    await next();
    if (!(await isFailedSignIn(c.res))) await refundToken(deps, key);
  };
}

/** The email of a sign-in request, or undefined when the body has none (the library answers its own 400). */
async function signInEmail(request: Request): Promise<string | undefined> {
  try {
    const body = (await request.clone().json()) as { email?: unknown } | null;
    return typeof body?.email === 'string' && body.email.length > 0 && body.email.length <= 320 ? body.email : undefined;
  } catch {
    return undefined;
  }
}

async function isFailedSignIn(response: Response): Promise<boolean> {
  if (response.status !== 401) return false;
  try {
    const body = (await response.clone().json()) as { code?: unknown } | null;
    return body?.code === 'INVALID_EMAIL_OR_PASSWORD';
  } catch {
    return false;
  }
}

async function sha256Hex(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text)));
  return Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
}
