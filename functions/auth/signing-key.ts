import { inTurn, type Database } from '../platform/db.ts';
import type { Auth } from './better-auth.ts';

/**
 * The first signing key of the auth library's jwt plugin, made at start by one instance at a time (inTurn). The
 * library makes one on first use when its `jwks` table is empty, without a lock, so instances serving their first
 * tokens at once each made their own, and for a moment one instance's /jwks did not list the key another signed with
 * (an agent backend caching that answer refused the tokens). Asking for the key set makes the key when there is none.
 */
export async function ensureSigningKey(auth: Auth, database: Database): Promise<void> {
  await inTurn(database, 'signing_key', () => auth.api.getJwks());
}
