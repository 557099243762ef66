import { rows, sql } from '../../functions/platform/db.ts';
import type { TestApp } from './app.ts';

/**
 * The mail outbox as tests see it. The test app never runs the delivery loop (whatever NODE_ENV it simulates), so a test
 * delivers explicitly with `deliverMail(t)` and reads what was written with `mailsTo(t, email)`.
 */

export interface OutboxMail {
  id: string;
  to: string;
  subject: string;
  text: string;
  status: 'pending' | 'sent' | 'logged' | 'failed';
  attempts: number;
  lastError: string | null;
}

/** Mails to an address, oldest first. */
export async function mailsTo(t: TestApp, email: string): Promise<OutboxMail[]> {
  return rows<OutboxMail>(
    t.db,
    sql`select id, to_address as "to", subject, text_body as text, status, attempts, last_error as "lastError"
          from mail_outbox where lower(to_address) = lower(${email}) order by created_at, id`,
  );
}

/** The newest mail to an address; throws when there is none. */
export async function lastMailTo(t: TestApp, email: string): Promise<OutboxMail> {
  const all = await mailsTo(t, email);
  const last = all[all.length - 1];
  if (!last) throw new Error(`no mail to ${email}`);
  return last;
}

/**
 * The leases of the mails claimed now run out, as LEASE_MS passing would (a holder frozen, or gone). Leases are in the
 * database's clock (platform/lease.ts), which a test cannot move: moving the test clock leaves them as they are.
 */
export async function expireMailLeases(t: TestApp): Promise<void> {
  await sql`update mail_outbox set next_attempt_at = now() - interval '1 millisecond'
             where status = 'pending' and claim_id is not null`.execute(t.db);
}

/** Runs one delivery pass of the outbox (SMTP when the app has SMTP_URL, else the log). */
export function deliverMail(t: TestApp): Promise<number> {
  return t.deps.mailer.deliverPending();
}

/** The first http(s) URL in a mail's text. */
export function linkIn(mail: { text: string }): URL {
  const m = /https?:\/\/\S+/.exec(mail.text);
  if (!m) throw new Error(`no link in mail: ${mail.text}`);
  return new URL(m[0]);
}
