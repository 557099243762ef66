import { AsyncLocalStorage } from 'node:async_hooks';
import type { Transaction } from 'kysely';
import type { Database, Db } from '../platform/db.ts';

/**
 * The auth library's database handle, and a way to run a whole library request in one transaction of ours.
 *
 * The library writes each row in a statement of its own (its adapter calls, made by the oauth-provider plugin
 * straight on the handle it was given, join no transaction of Better Auth's either). Where a request's writes must
 * stand or fall together, the token endpoint's grant (the code used up, or the refresh token rotated, and the tokens
 * that replace it), `inLibraryTransaction` opens a transaction and, while its work runs, every query the library
 * sends through `libraryDb` runs in it: a database connection lost between two of them kept the first, and the agent's
 * retry met a used code or a revoked refresh token (found by review 42).
 */
const pinned = new AsyncLocalStorage<Db>();

/**
 * `db` as the library sees it, each handle made ready by `prepare` (its Kysely plugins): within `inLibraryTransaction`,
 * that transaction; otherwise `db` itself. A transaction the library opens inside ours runs as part of ours (a failure
 * in it fails the request, and ours rolls back).
 */
export function libraryDb(db: Db, prepare: (handle: Db) => Db): Db {
  const prepared = new WeakMap<Db, Db>();
  const within = (trx: Db): Db => {
    let handle = prepared.get(trx);
    if (!handle) prepared.set(trx, (handle = prepare(trx)));
    return handle;
  };
  const base = prepare(db);
  // The base handle's methods, bound once: every library query reads a few of them (sessions on the cookie path too).
  const baseMethods = new Map<PropertyKey, unknown>();
  return new Proxy(base, {
    get(target, property) {
      const trx = pinned.getStore();
      if (!trx) {
        if (!baseMethods.has(property)) baseMethods.set(property, methodOf(target, property));
        return baseMethods.get(property) ?? Reflect.get(target, property, target);
      }
      const current = within(trx);
      if (property === 'transaction') return () => ({ execute: <T>(work: (trx: Db) => Promise<T>) => work(current) });
      return methodOf(current, property) ?? Reflect.get(current, property, current);
    },
  });
}

/**
 * `handle[property]` bound to the handle, when it is a method: Kysely's methods read private fields, so they must be
 * called on the handle itself, not on the proxy. Undefined for anything else, a getter's value included (`fn`, itself
 * a function with functions as properties, is read afresh and handed over as it is).
 */
function methodOf(handle: Db, property: PropertyKey): unknown {
  if (isGetter(handle, property)) return undefined;
  const value: unknown = Reflect.get(handle, property, handle);
  return typeof value === 'function' ? value.bind(handle) : undefined;
}

function isGetter(object: object, property: PropertyKey): boolean {
  for (let at: object | null = object; at; at = Object.getPrototypeOf(at)) {
    const descriptor = Object.getOwnPropertyDescriptor(at, property);
    if (descriptor) return descriptor.get !== undefined;
  }
  return false;
}

/**
 * Runs `work` in one transaction that the library's queries join (see above). `work` gets the transaction's handle
 * for its own queries: rows the library wrote are visible only there until the commit. The transaction is kept unless
 * `work` throws or its answer is a 5xx (a statement failed: a lost connection, a deadlock ended by PostgreSQL); a 4xx
 * is kept, since the library's refusals also write (a reused code or refresh token ends its grant).
 *
 * On a real server only. The embedded database has one connection, which the transaction would hold while a hook of
 * the library's (mails) waits for it; and a lost connection is not something it can meet: `work` runs as before, on `db`.
 */
export async function inLibraryTransaction(database: Database, work: (db: Db) => Promise<Response>): Promise<Response> {
  if (database.kind !== 'postgres') return work(database.db);
  let failed: Response | undefined;
  try {
    return await database.db.transaction().execute(async (trx: Transaction<any>) => {
      const response = await pinned.run(trx, () => work(trx));
      if (response.status < 500) return response;
      failed = response;
      throw new Error('rolled back: the library answered a 5xx'); // (Kysely rolls back on a throw)
    });
  } catch (error) {
    // Also when the rollback itself failed on the lost connection (the server ended the transaction with it).
    if (failed) return failed;
    throw error;
  }
}
