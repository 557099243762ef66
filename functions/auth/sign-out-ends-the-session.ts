import type { Context, Next } from 'hono';
import { first, sql } from '../platform/db.ts';
import type { AppEnv } from '../platform/app-types.ts';
import { ApiError } from '../http/errors.ts';

/**
 * A sign-out answers success only once its session is gone. The library deletes the session, logs a failure of
 * that delete, and answers 200 with the cookie cleared whatever happened: a user signing out of a shared computer
 * while the database refused the delete was told they were out, and the session (with any copy of its cookie: a
 * stolen one is the reason many sign out) went on working until it expired.
 *
 * So the session is read before the library runs, and after its 200 it must be gone; if it is not, the answer is
 * 503 `UNAVAILABLE` (Retry-After: 1, reason `session_not_ended`) and the cookie is left in place, so the browser
 * is still signed in where it can see it and the user, or the front end, sends the sign-out again. A database that
 * cannot be read at all answers the same 503 through the app's error handler, before the library runs.
 */
export function signOutOnlyWhenTheSessionEnds() {
  return async (c: Context<AppEnv>, next: Next) => {
    const { auth, database, logger } = c.var.deps;
    // disableRefresh: reading the session must not extend it, the request is there to end it.
    const before = await auth.api.getSession({ headers: c.req.raw.headers, query: { disableCookieCache: true, disableRefresh: true } });
    await next();
    if (!before || c.res.status !== 200) return;
    const left = await first(database.db, sql`select 1 from "session" where id = ${before.session.id}`);
    if (left === undefined) return;
    logger.error('sign-out: the auth library answered 200 but the session is still there', { requestId: c.var.requestId, userId: before.user.id });
    // The library's answer goes, its Set-Cookie that clears the cookie with it (Hono carries a replaced response's
    // headers over to the next one; undefined first drops them).
    c.res = undefined;
    throw new ApiError('UNAVAILABLE', 'The session could not be ended; send the sign-out again', { reason: 'session_not_ended' }, { 'Retry-After': '1' });
  };
}
