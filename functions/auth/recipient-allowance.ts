import type { Clock } from '../platform/clock.ts';
import { first, sql, type Database } from '../platform/db.ts';
import { takeToken } from '../platform/rate-limits.ts';
import type { Logger } from '../platform/logger.ts';

/**
 * Account mails to one mailbox are limited per hour, whoever asks and from however many client addresses: each is
 * asked for anonymously by naming an address, and only the per-client-address limit stood, so one client made the
 * service mail a victim about 90 times a minute (a mail bomb in our name; found by a review). Past an allowance the
 * request answers exactly as before (nothing tells an asker the mail was held back) and no mail is queued; a line is
 * logged without the address. Counted in PostgreSQL (public.rate_limits), so all instances share it, under the
 * SHA-256 of the mailbox (mailboxOf): the table holds no address. Three allowances, counted apart:
 *   * links (the verification link, the password-reset link) to the mailbox's addresses not yet confirmed:
 *     MAILS_PER_RECIPIENT_PER_HOUR (`mail-to|`);
 *   * links to its confirmed addresses (an account holds the address verified): MAILS_PER_RECIPIENT_PER_HOUR more
 *     (`mail-to-confirmed|`). With one pool per mailbox, anyone made accounts at its other spellings (`owner+1@`, ...)
 *     and spent the owner's hour on their links, of no use to the owner; only the mailbox's owner confirms an address
 *     (by a link mailed to it), so only their own accounts' addresses draw on this pool, and only with reset links (a
 *     confirmed address gets no verification link). Anyone may still ask for those links, anonymously, and spend the
 *     hour (review 75): every link counted went to the owner's mailbox and works, and a request held back ends no
 *     link, so the owner can still reset with the newest link mailed;
 *   * the "someone tried to create an account with your address" notice: SIGN_UP_NOTICES_PER_RECIPIENT_PER_HOUR
 *     (`signup-notice-to|`). Anyone sets it off by signing up with the address, and it carries no link: out of the
 *     links' pool, ten anonymous sign-ups at the start of each hour left the owner no reset and no verification link,
 *     every request answered 200 (review 33; invitations left that pool for the same reason, invitation-rules.ts).
 *     One an hour: it only tells the owner someone tried (perhaps they themselves, who need no second one).
 * So one mailbox gets at most 2 x 10 + 1 account mails an hour.
 */
export const MAILS_PER_RECIPIENT_PER_HOUR = 10;
export const SIGN_UP_NOTICES_PER_RECIPIENT_PER_HOUR = 1;
const HOUR_MS = 60 * 60 * 1000;

export type AccountMail = 'verification' | 'password reset' | 'existing-account sign-up';

export async function mayMailRecipient(
  deps: { database: Database; clock: Clock; logger: Logger },
  email: string,
  kind: AccountMail,
): Promise<boolean> {
  const mailbox = await mailboxKey(email);
  const [key, limit] =
    kind === 'existing-account sign-up'
      ? [`signup-notice-to|${mailbox}`, SIGN_UP_NOTICES_PER_RECIPIENT_PER_HOUR]
      : [`${(await isConfirmed(deps.database, email)) ? 'mail-to-confirmed' : 'mail-to'}|${mailbox}`, MAILS_PER_RECIPIENT_PER_HOUR];
  const verdict = await takeToken(deps, key, limit, HOUR_MS);
  const allowed = verdict.allowed;
  if (!allowed) deps.logger.warn('account mail not sent: its mailbox had its hourly allowance', { kind, retryAfterSec: verdict.retryAfterSec });
  return allowed;
}

/** Whether this very address is an account's confirmed one (accounts hold their address lower-cased). */
async function isConfirmed(database: Database, email: string): Promise<boolean> {
  const row = await first<{ confirmed: boolean }>(database.db, sql`select "emailVerified" as confirmed from "user" where email = ${email.trim().toLowerCase()}`);
  return row?.confirmed === true;
}

/**
 * The mailbox an address is delivered to, as the per-recipient allowances count it (here and the invitations',
 * invitation-rules.ts); never what an account holds or where a mail goes. `victim+1@`, `victim+2@`, ... were new
 * addresses to the allowances and one inbox at Gmail, Outlook, iCloud, Fastmail and Proton: 84 account mails a minute
 * to one person again (review 33). So, lower-cased: a `+tag` is dropped from the local part at every domain (the
 * separator RFC 5233 describes and the big providers use; a few use `-`, not folded, since `-` is common in local
 * parts, `mary-jane@`, and folding it would join different people's counts); at gmail.com and googlemail.com (one
 * service, which also ignores dots) the dots go too and googlemail.com is gmail.com. Where a `+` is a real part of the
 * name, that address shares its base address's allowance: a smaller hour for it, never a larger one for anyone.
 */
function mailboxOf(email: string): string {
  const address = email.trim().toLowerCase();
  const at = address.lastIndexOf('@');
  if (at < 1) return address;
  let local = address.slice(0, at);
  let domain = address.slice(at + 1);
  const plus = local.indexOf('+');
  if (plus > 0) local = local.slice(0, plus);
  if (domain === 'googlemail.com') domain = 'gmail.com';
  if (domain === 'gmail.com') local = local.replaceAll('.', '');
  return `${local}@${domain}`;
}

/** The key part of a per-recipient count: the SHA-256 of the address's mailbox (the table holds no address). */
export async function mailboxKey(email: string): Promise<string> {
  return sha256Hex(mailboxOf(email));
}

/** Hex SHA-256: keys of per-account counts that must not hold the address itself. */
export async function sha256Hex(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text)));
  return Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
}
