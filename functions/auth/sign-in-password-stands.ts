import type { Context, Next } from 'hono';
import { BASE_ERROR_CODES } from '@better-auth/core/error';
import type { AppEnv } from '../platform/app-types.ts';
import { first, sql, type Db } from '../platform/db.ts';
import { signInEmail } from './failed-sign-ins.ts';

/**
 * A sign-in keeps its session only if the password it checked still stands once the session exists (review 24,
 * finding 1; contract.md, Trust boundaries: "A password reset or change ends every session ... of the user"; security
 * rule 9).
 *
 * The library reads the password hash, checks it (scrypt, tens of milliseconds), then inserts the session. A password
 * write (change, reset, a purchase claim, ADMIN_PASSWORD at start) ends the sessions it sees in its own transaction (the
 * trigger on account.password, public.revoke_user_credentials); a session inserted after that transaction committed,
 * by a sign-in that had checked the OLD password, was left alive: a thief holding the old password, signing in again
 * and again, kept a session through the owner's change or reset.
 *
 * The credential's version is its stored hash (a fingerprint of it: every write of a password makes a new salted hash,
 * and the trigger fires only when the hash changes). It is read before the library reads the hash and again once the
 * library has answered 200 with a session; if it changed, the session is deleted and the answer is the library's wrong
 * password (401 INVALID_EMAIL_OR_PASSWORD, no Set-Cookie): the password it was made with no longer holds. Why no
 * window is left, for a password write W committing while sign-in S runs (both in READ COMMITTED):
 *  - S's library checked the old hash, so its read of the hash began before W committed, and so did S's first read
 *    here, which comes before it: that read saw the old version.
 *  - If S's session insert took its FOR SHARE lock on the user's row (trigger session_refuses_banned_user, migration
 *    20261127003600) before W's revoke_user_credentials took its FOR UPDATE lock there, W waited until the insert had
 *    committed, and W's delete of the user's sessions, a statement after that lock, saw the session and deleted it.
 *  - Otherwise the insert waited for W's lock, so it returned only after W committed; the second read here comes after
 *    it and sees W's new hash: the session is deleted here.
 * Either way no session made with the old password outlives W; that holds whether W committed during the scrypt check
 * (nothing waits) or while the insert waited for W's lock. A session whose insert W saw is W's to delete; this
 * answers its sign-in 200 or 401 by what the second read saw, and the session is gone in both.
 *
 * The price: one more read (the user's unique email, then its account) before every sign-in and one after a
 * successful one; and a sign-in with the NEW password whose first read came just before the write committed is
 * answered 401 too (it can be sent again at once), since nothing here tells which hash the library checked.
 * Every sign-in by email and password reaches the library through this route (mount.ts); the browser sign-in pages
 * post to it as well.
 */
export function signInOnlyWithAStandingPassword() {
  return async (c: Context<AppEnv>, next: Next) => {
    const db = c.var.deps.database.db;
    const email = await signInEmail(c.req.raw);
    const before = email === undefined ? null : await credentialVersion(db, email);
    await next();
    // A sign-in made a session when its answer sets the session cookie, whatever its status and body: with an
    // `oauth_query` the OAuth plugin answers 302 (a navigation) or 200 { redirect, url } (a fetch), neither with the
    // token in a body (the read-through of review 24's mend found both passing the check).
    const token = sessionTokenSet(c.res, (await c.var.deps.auth.$context).authCookies.sessionToken.name);
    if (token === undefined) return;
    // (A session with no version before it, an account that got its credential meanwhile, is not let through either.)
    if (before !== null && email !== undefined && (await credentialVersion(db, email)) === before) return;
    await sql`delete from "session" where token = ${token}`.execute(db);
    const made = c.res;
    c.res = undefined;
    c.res = wrongPassword(made);
  };
}

/** The session token an answer's Set-Cookie gives the browser (`<token>.<signature>`, URL-encoded), if any. */
function sessionTokenSet(response: Response, cookieName: string): string | undefined {
  for (const cookie of response.headers.getSetCookie()) {
    const [pair] = cookie.split(';');
    const at = pair!.indexOf('=');
    if (at < 0 || pair!.slice(0, at).trim() !== cookieName) continue;
    const token = decodeURIComponent(pair!.slice(at + 1).trim()).split('.')[0];
    if (token) return token;
  }
  return undefined;
}

/**
 * The version of the credential the library would check for this email: md5 of its stored hash (the account found as
 * the library finds it: the user by lower-cased email, its `credential` account whose accountId is the user's id), or
 * null when there is none.
 */
async function credentialVersion(db: Db, email: string): Promise<string | null> {
  const row = await first<{ version: string | null }>(
    db,
    sql`select md5(a.password) as version
          from "user" u
          join account a on a."userId" = u.id and a."providerId" = 'credential' and a."accountId" = u.id
         where u.email = ${email.toLowerCase()}`,
  );
  return row?.version ?? null;
}

/**
 * The library's answer to a wrong password, with the headers the sign-in's answer carried (request id, CORS, ...)
 * but not its session cookie. (Hono copies the old response's headers, Set-Cookie included, into one assigned over
 * it: the slot is emptied first.)
 */
function wrongPassword(made: Response): Response {
  const headers = new Headers(made.headers);
  for (const name of ['set-cookie', 'content-length', 'location']) headers.delete(name);
  headers.set('content-type', 'application/json');
  const { code, message } = BASE_ERROR_CODES.INVALID_EMAIL_OR_PASSWORD;
  return new Response(JSON.stringify({ message, code }), { status: 401, headers });
}
