import type { Context, Next } from 'hono';
import { jwtVerify } from 'jose';
import type { AppEnv } from '../platform/app-types.ts';
import { first, sql } from '../platform/db.ts';
import { trustedOrigins } from './better-auth.ts';

/**
 * The verification link verifies an address only in a browser signed in to that account (GET /api/auth/verify-email,
 * ahead of the library). Anyone may create an unverified account with someone else's address and a password of
 * their own; the library's link then verified that account for whoever clicked it, and the creator's password and
 * sessions held a verified address: they accepted the organization invitation meant for the address's owner (found
 * by a review; the purchase-claim link already ends such credentials, contract.md "Anonymous purchases").
 *
 * Now a click without a session of that account verifies nothing: the browser goes to the link's callbackURL with
 * `error=SIGN_IN_TO_VERIFY` and `verify=<the link>` (without a callbackURL: 401 `{ code: "SIGN_IN_TO_VERIFY" }`);
 * the built-in sign-in page opens the link again once signed in (a front end does the same). The address's real owner, who cannot sign in with a password someone else chose,
 * uses "forgot password": the reset goes to the mailbox, proves it, verifies the address and ends every OAuth consent
 * given from the account (better-auth.ts, onPasswordReset: a consent the creator gave let that agent sign the owner in
 * silently afterwards, review 05) and every session and token of the account (the password trigger). Verified or unknown
 * accounts, malformed tokens and callbacks off our origins go to the library, which answers them as before.
 */
export function verifyOnlyInTheAccountsSession() {
  return async (c: Context<AppEnv>, next: Next) => {
    const { config, database, auth } = c.var.deps;
    const url = new URL(c.req.url);
    const email = await emailOfToken(url.searchParams.get('token'), config.authSecret);
    if (!email) return next();
    const callbackParam = url.searchParams.get('callbackURL');
    const callback = callbackParam ? ownUrl(callbackParam, trustedOrigins(config), config.publicBaseUrl) : undefined;
    // A callback on another site: the library refuses it (403) before it verifies anything.
    if (callbackParam && !callback) return next();
    const holder = await first<{ verified: boolean }>(
      database.db,
      sql`select "emailVerified" as verified from "user" where lower(email) = ${email}`,
    );
    if (!holder || holder.verified) return next();
    const session = await auth.api.getSession({ headers: c.req.raw.headers }).catch(() => null);
    if (session && session.user.email.toLowerCase() === email) return next();
    const message = 'Sign in to this account, then open the link again: it verifies the address only in its own session';
    // Without a callback (a link stripped of it, or a front end calling the endpoint itself) the answer is the
    // library's shape for a link that cannot be used, 401 with a code; it verified the address for anyone before.
    if (!callback) return c.json({ code: 'SIGN_IN_TO_VERIFY', message }, 401);
    // (Without the mail's `verified=true`: beside the error it told a front end reading it that the address was
    // confirmed when nothing was; review 101.)
    callback.searchParams.delete('verified');
    callback.searchParams.set('error', 'SIGN_IN_TO_VERIFY');
    callback.searchParams.set('verify', `${url.pathname}${url.search}`);
    return c.redirect(callback.href, 302);
  };
}

/**
 * The address a valid verification token names (the library's own check: HS256 with the auth secret); a forged,
 * altered or expired one goes on to the library, which answers it (INVALID_TOKEN, TOKEN_EXPIRED).
 */
async function emailOfToken(token: string | null, secret: string): Promise<string | undefined> {
  if (!token) return undefined;
  try {
    const { payload } = await jwtVerify(token, new TextEncoder().encode(secret), { algorithms: ['HS256'] });
    // An address change's token (updateTo) is the library's own flow (change-email is closed here anyway).
    if (payload.updateTo !== undefined || typeof payload.email !== 'string') return undefined;
    return payload.email.toLowerCase();
  } catch {
    return undefined;
  }
}

/** The callback when it is on one of our trusted origins (the library's own rule for where it redirects). */
function ownUrl(value: string | null, origins: string[], base: string): URL | undefined {
  if (!value) return undefined;
  try {
    const url = new URL(value, base);
    return origins.includes(url.origin) ? url : undefined;
  } catch {
    return undefined;
  }
}
