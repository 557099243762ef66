import type { Clock } from '../platform/clock.ts';
import type { Database } from '../platform/db.ts';
import { takeToken } from '../platform/rate-limits.ts';
import type { Logger } from '../platform/logger.ts';

/**
 * Account mails to one address (the verification link, the "someone tried to sign up with your address" notice, the
 * password-reset link) are at most MAILS_PER_RECIPIENT_PER_HOUR an hour, whoever asks and from however many client
 * addresses: each is asked for anonymously by naming the address, and only the per-client-address limit stood, so one
 * client made the service mail a victim about 90 times a minute (a mail bomb in our name; found by a review). Past
 * the allowance the request answers exactly as before (nothing tells an asker the mail was held back) and no mail is
 * queued; a line is logged without the address. Counted in PostgreSQL (public.rate_limits), so all instances share
 * it, under `mail-to|<SHA-256 of the lower-cased address>`: the table holds no address.
 */
export const MAILS_PER_RECIPIENT_PER_HOUR = 10;
const HOUR_MS = 60 * 60 * 1000;

export async function mayMailRecipient(
  deps: { database: Database; clock: Clock; logger: Logger },
  email: string,
  kind: string,
): Promise<boolean> {
  const verdict = await takeToken(deps, `mail-to|${await sha256Hex(email.trim().toLowerCase())}`, MAILS_PER_RECIPIENT_PER_HOUR, HOUR_MS);
  const allowed = verdict.allowed;
  if (!allowed) deps.logger.warn('account mail not sent: its address had its hourly allowance', { kind, retryAfterSec: verdict.retryAfterSec });
  return allowed;
}

/** Hex SHA-256: keys of per-account counts that must not hold the address itself. */
export async function sha256Hex(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text)));
  return Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
}
