import { ApiError } from '../http/errors.ts';
import { sql, type RawBuilder } from '../platform/db.ts';

/**
 * The signed-in caller's "user" row, read `for key share` (what a foreign key check of the row takes), for a `with
 * author as (...)` at the head of a catalog write. A removal of the user (whose trigger erases their catalog rows,
 * migration 20261127000200) that starts after this read waits for the write's transaction and then erases what it
 * wrote; one that ended before it leaves no row, and the write writes nothing: `accountGone()`, a 401. Without it a
 * write authenticated before the removal and made after it stayed for a user who no longer exists (a review), or
 * met the foreign key of `interactions.user_id` and answered 500 (an install, a waitlist join: review 19).
 * A null id (an anonymous caller) reads no row.
 */
export function heldUser(userId: string | null): RawBuilder<{ id: string }> {
  return sql<{ id: string }>`select u.id from public."user" u where u.id = ${userId} for key share`;
}

/** The answer to a caller whose account was removed after the request was authenticated. */
export function accountGone(): ApiError {
  return new ApiError('UNAUTHORIZED', 'This account no longer exists');
}
