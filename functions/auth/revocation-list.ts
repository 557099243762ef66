import { sql, type Db } from '../platform/db.ts';
import type { Logger } from '../platform/logger.ts';

/**
 * Housekeeping of `revoked_tokens`: a row only matters until the last access token it covers has expired
 * (`expires_at`), so expired rows are deleted now and then. Nothing depends on this for correctness; it keeps
 * the table (and its primary-key index, read on every bearer request) small.
 */
export async function pruneRevokedTokens(db: Db, now: Date): Promise<number> {
  const result = await sql`delete from revoked_tokens where expires_at < ${now}`.execute(db);
  return Number(result.numAffectedRows ?? 0);
}

/** Prunes every `everyMs` (Node entry; the edge runtime has no long-lived process to run it). */
export function startRevocationListPruning(db: Db, now: () => Date, logger: Logger, everyMs = 15 * 60_000): () => void {
  const timer = setInterval(() => {
    pruneRevokedTokens(db, now()).catch((err) => logger.warn('pruning revoked_tokens failed', { err }));
  }, everyMs);
  (timer as { unref?: () => void }).unref?.();
  return () => clearInterval(timer);
}
