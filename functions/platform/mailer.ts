import type { Clock } from './clock.ts';
import type { Config } from './config.ts';
import { isConnectionLost, rows, sql, type Db } from './db.ts';
import { claimable, leaseEnd, leaseEndsAt, recordWithinLease } from './lease.ts';
import type { Logger } from './logger.ts';
import { oneLine, withoutDoubleQuotes } from './text.ts';

/**
 * Outgoing mail through an outbox table (`mail_outbox`, migration 20261122000200_auth.sql).
 *
 * `enqueue(db, mail)` is one INSERT on whatever handle the caller passes, so a mail commits or rolls back with
 * the caller's transaction (an invitation mail never goes out for an invitation that was rolled back).
 * `deliverPending()` then sends what is due: over SMTP (nodemailer, loaded lazily so the edge bundle never sees it)
 * when SMTP_URL is set, else it only logs the mail. Failed sends are retried with backoff; nothing is lost while the
 * mail server is down (attempts go on, 2^n seconds apart up to 10 minutes, for 24 hours). Whoever runs the background work calls it: the scheduled drain (POST /internal/drain, see
 * functions/internal/), or the Node entry's loop (`start()`), a convenience nothing depends on.
 *
 * Any number of processes may deliver at once and none sends a mail another one holds: a pass claims due mail with
 * FOR UPDATE SKIP LOCKED and leases it (next_attempt_at moves to the lease's end, LEASE_MS ahead in the database's
 * clock, and claim_id names the pass) in one statement; platform/lease.ts has the rules of the outboxes' leases (whose
 * clock decides what; review 25). The lease outlasts the longest a pass can hold a mail: a pass starts no send after
 * PASS_BUDGET_MS (the rest of its claim is handed back at once) and one send is abandoned after SEND_DEADLINE_MS
 * whatever the mail server does (the SMTP connection is closed), so a lease never runs out under a send still going.
 * nodemailer's own timeouts bound only the connection, the greeting and each silence: a server that keeps answering a
 * line at a time held one send for ever (review 31), another instance sent the mail again when the lease ran out, and
 * this pass, shared by every caller of the process, sent nothing else meanwhile.
 * Should a lease still run out under a send (a process frozen for minutes), the claim_id keeps the late holder from
 * undoing what the new one recorded: its failure and its hand-back apply only while the row still carries its claim.
 * A process that dies mid-send leaves its claim to be retried when the lease ends (at least once, as SMTP is).
 * A process that is stopped (`stop()`, on SIGTERM) starts no send after that: the send under way finishes and is
 * recorded, and the rest of the pass's claim is handed back at once (review 25: a pass went on sending its batch for
 * up to PASS_BUDGET_MS after stop() returned and the database was closed, so each of those mails went out unrecorded
 * and another instance sent it again when its lease ran out).
 *
 * Secrets in mails (password reset links, invitation links): the log line carries the recipient and subject,
 * and the body only outside production, with its tokens redacted like every log line. So that a developer without
 * SMTP can still open a mailed link (the embedded database cannot be read by another process while the service
 * runs), the log transport also writes each mail whole to a file when the entry gives it a place (`files`: the Node
 * entry's `<DATA_DIR>/mail/`), outside production only, and the log line names that file. In production without
 * SMTP the body stays in the outbox table (readable by the operator), never in the logs or on disk.
 */

/**
 * User text (a name, an organization's name) as a mail quotes it: one line, at most 80 characters, in double quotes it
 * cannot close (its own double quotes become single ones), so that it can neither start lines of its own in the mail
 * nor pass for the mail's own words.
 */
export function quotedText(text: string): string {
  const line = withoutDoubleQuotes(oneLine(text));
  const short = line.length > 80 ? `${line.slice(0, 79)}…` : line;
  return `"${short}"`;
}

/**
 * Free text of several lines someone else wrote (a demo request's message) as a mail quotes it: every line starts with
 * "> ", each made one line as oneLine() makes it (carriage returns, the Unicode line and paragraph separators and
 * U+0085 end a line too), so that no line of it can pass for a line of the mail's own (review 74: a message wrote a
 * second "... asked for a demo" line with another person's address, and an "Agent:" link to the sender's site).
 */
export function quotedLines(text: string): string {
  return text
    .split(/\r\n|[\n\r\v\f\u0085\u2028\u2029]/u)
    .map((line) => `> ${oneLine(line)}`.trimEnd())
    .join('\n');
}

export interface Mail {
  to: string;
  subject: string;
  text: string;
  html?: string | undefined;
}

export interface Mailer {
  /** Writes the mail to the outbox inside the caller's transaction (pass `trx` when in one). */
  enqueue(db: Db, mail: Mail): Promise<{ id: string }>;
  /**
   * Sends (or logs) mail that is due now, up to `limit` mails (default one batch of 20) in passes of 20; returns how
   * many were handled. One pass at a time per process (a second caller shares it).
   */
  deliverPending(options?: { limit?: number }): Promise<number>;
  /** Starts the background delivery loop (Node entry and tests; idempotent). */
  start(): void;
  /**
   * Stops the loop, and the delivery pass already running after its send in flight (the rest of its claim is handed
   * back), and waits for that pass (at most the send deadline and a few seconds), so the database can be closed after
   * it. After stop(), deliverPending() sends nothing until start().
   */
  stop(): Promise<void>;
}

/** A mail as a transport gets it: the outbox row's id, the sender, and when it is sent. */
export type OutgoingMail = Mail & { id: string; from: string; date: Date };

/**
 * A mail's Message-ID: its outbox row's id at the sender's domain, the same on every attempt. A send whose answer never
 * came (its deadline passed after the server had taken the mail) is sent again; with one Message-ID the servers and
 * mail programs that drop repeats show it once, where a new id on each attempt made it two mails.
 */
export function messageIdOf(mail: Pick<OutgoingMail, 'id' | 'from'>): string {
  const domain = /@([^\s<>@]+)>?\s*$/.exec(mail.from)?.[1] ?? 'agent-marketplace.invalid';
  return `<${mail.id}@${domain}>`;
}

/** Something that can send one mail. Injected by tests; defaults to SMTP or the log. */
export interface MailTransport {
  kind: 'smtp' | 'log';
  /** `signal` aborts when the send's deadline passes: stop and let go of the connection (the mailer has moved on). */
  send(mail: OutgoingMail, signal?: AbortSignal): Promise<void>;
}

/** A place that keeps logged mails as files (Node only: platform/mail-files.ts). */
export interface MailFiles {
  /** Writes one mail; answers the file's path. */
  write(mail: OutgoingMail): Promise<string>;
}

export interface MailerOptions {
  config: Config;
  db: Db;
  logger: Logger;
  clock: Clock;
  transport?: MailTransport;
  /** How often the loop looks for due mail (ms). */
  pollMs?: number;
  /** A send is abandoned after this long (ms; default SEND_DEADLINE_MS). Tests shorten it. */
  sendDeadlineMs?: number;
  /** Where the log transport also writes each mail (without SMTP, outside production only; ignored otherwise). */
  files?: MailFiles | undefined;
}

/** A mail is retried until an attempt fails this long after it was written (then `failed`; it stays in the outbox). */
const RETRY_WINDOW_MS = 24 * 60 * 60 * 1000;
/** Backoff between attempts: 2^attempts seconds, at most this (a mail server back after an outage is used soon). */
const MAX_BACKOFF_MS = 10 * 60 * 1000;
const BATCH = 20;
/** How long a claimed mail is left alone by other processes (in the database's clock: platform/lease.ts). */
export const LEASE_MS = 120_000;
/** A pass starts no new send after this long; what it still holds goes back to the outbox, due at once. */
export const PASS_BUDGET_MS = 20_000;
/**
 * A whole send (connection, greeting, every command and the data) ends by this long after it started, sent or not.
 * PASS_BUDGET_MS + SEND_DEADLINE_MS leaves 40 s of the lease for recording the outcome, so a send never outlives its
 * lease; a "sent" that the database does not take at once is tried again through those 40 s (recordWithinLease).
 */
export const SEND_DEADLINE_MS = 60_000;
/** What stop() allows, after the send in flight, for its record and the hand-back of the rest. */
const STOP_GRACE_MS = 5_000;
/**
 * How long stop() waits at most for the pass under way: the send in flight (SEND_DEADLINE_MS at most), its record and
 * the hand-back of the rest. The Node entry's shutdown allows for it (scripts/serve.ts).
 */
export const STOP_WAIT_MS = SEND_DEADLINE_MS + STOP_GRACE_MS;
/** SMTP timeouts (ms): each bounds one stage or one silence only; SEND_DEADLINE_MS bounds the whole send. */
export const SMTP_TIMEOUTS = { connectionTimeout: 10_000, greetingTimeout: 10_000, socketTimeout: 30_000 } as const;

export function createMailer(options: MailerOptions): Mailer {
  const { config, db, logger, clock } = options;
  // Mail files hold the mails' tokens: never in production, whatever the entry passed.
  const files = config.isProduction ? undefined : options.files;
  const transport = options.transport ?? (config.smtp ? smtpTransport(config.smtp.url) : logTransport(config, logger, files));
  const from = config.smtp?.from ?? config.mailFrom;
  const pollMs = options.pollMs ?? 1000;
  const sendDeadlineMs = options.sendDeadlineMs ?? SEND_DEADLINE_MS;
  let timer: ReturnType<typeof setInterval> | undefined;
  let running: Promise<number> | undefined;
  let kickTimer: ReturnType<typeof setTimeout> | undefined;
  /** Set by stop(): the pass under way starts no further send. */
  let stopping = false;

  async function deliverOnce(want: number, startedAt: number): Promise<number> {
    const now = clock.now();
    const claimId = crypto.randomUUID();
    // Before the claim is sent, so never later than the lease's end the database writes.
    const leaseEnds = leaseEndsAt(LEASE_MS);
    // Claim due mail: pushing next_attempt_at forward first means a crash mid-send retries later instead of
    // never, and a second process skips what this one holds.
    const due = await rows<{ id: string; to_address: string; subject: string; text_body: string; html_body: string | null; attempts: number; created_at: Date | string }>(
      db,
      sql`update mail_outbox o
             set attempts = o.attempts + 1,
                 next_attempt_at = ${leaseEnd(LEASE_MS)},
                 claim_id = ${claimId}
           where o.id in (select m.id from mail_outbox m
                           where m.status = 'pending' and ${claimable('m', now)}
                           order by m.next_attempt_at
                           limit ${want}
                           for update skip locked)
       returning o.id, o.to_address, o.subject, o.text_body, o.html_body, o.attempts, o.created_at`,
    );
    let handled = 0;
    for (const m of due) {
      if (stopping || performance.now() - startedAt > PASS_BUDGET_MS) {
        // Out of time (a slow mail server), or the process is stopping: hand the rest back, due at once, as if never
        // claimed, so another instance sends it now rather than when the lease ends.
        const rest = due.slice(handled).map((r) => r.id);
        await sql`update mail_outbox set attempts = attempts - 1, next_attempt_at = ${clock.now()}, claim_id = null
                   where id = any(${rest}::uuid[]) and status = 'pending' and claim_id = ${claimId}`.execute(db);
        break;
      }
      handled += 1;
      try {
        await sendWithin(sendDeadlineMs, (signal) =>
          transport.send(
            { id: m.id, from, date: clock.now(), to: m.to_address, subject: m.subject, text: m.text_body, html: m.html_body ?? undefined },
            signal,
          ),
        );
      } catch (err) {
        const giveUp = clock.now().getTime() - new Date(m.created_at).getTime() >= RETRY_WINDOW_MS;
        const backoffMs = Math.min(2 ** m.attempts * 1000, MAX_BACKOFF_MS);
        logger.warn('mail delivery failed', { mailId: m.id, attempts: m.attempts, giveUp, error: (err as Error).message });
        // Only while the mail is still this pass's: a holder whose lease ran out must not undo what the next one did
        // (put a mail it sent back to pending, to go out a third time).
        await sql`update mail_outbox
                     set status = ${giveUp ? 'failed' : 'pending'},
                         last_error = ${String((err as Error).message).slice(0, 500)},
                         next_attempt_at = ${new Date(clock.now().getTime() + backoffMs)},
                         claim_id = null
                   where id = ${m.id} and claim_id = ${claimId}`.execute(db);
        continue;
      }
      await recordSent(m.id, leaseEnds);
    }
    return handled;
  }

  /**
   * The mail is out: only recording that is left. A failure here (a connection cut by a restart or the network) is
   * not a failed delivery, so it must not schedule another send (the fault drill saw a mail arrive twice that way).
   * The write is tried again on fresh connections until shortly before the claim's lease ends (review 25: five tries
   * over about a second let a database restart of a few seconds get the mail sent twice); if it still fails, the
   * lease runs out and the mail is sent again later: SMTP cannot be made exactly-once, and this keeps the duplicate
   * window to a database outage longer than the lease's rest.
   *
   * Unlike a failure, this is recorded whoever holds the claim now: the mail did go out, and should a late send get
   * here after its lease was handed on, the new holder's failure must not send it a third time (clearing claim_id
   * makes that failure update nothing). Only a row that already says it went out is left as it is, which also makes a
   * try whose answer was lost safe to run again.
   */
  async function recordSent(id: string, leaseEnds: number): Promise<void> {
    try {
      await recordWithinLease(
        leaseEnds,
        () =>
          sql`update mail_outbox set status = ${transport.kind === 'smtp' ? 'sent' : 'logged'}, sent_at = ${clock.now()}, last_error = null,
                                     claim_id = null
               where id = ${id} and status in ('pending', 'failed')`.execute(db),
        (err, attempt) => {
          if (attempt === 1) logger.warn('mail sent; recording it failed, retrying until its claim expires', { mailId: id, error: (err as Error).message });
        },
      );
    } catch (err) {
      logger.error('mail sent but not recorded; it will be sent again when its claim expires', { mailId: id, err });
    }
  }

  async function deliverUpTo(limit: number): Promise<number> {
    const startedAt = performance.now();
    let total = 0;
    while (total < limit && !stopping) {
      const want = Math.min(limit - total, BATCH);
      const handled = await deliverOnce(want, startedAt);
      total += handled;
      // Fewer than asked: nothing more is due (or the time is up).
      if (handled < want || performance.now() - startedAt > PASS_BUDGET_MS) break;
    }
    return total;
  }

  function deliverPending(options: { limit?: number } = {}): Promise<number> {
    // A stopped mailer sends nothing more (a drain request still being answered while the process shuts down).
    if (stopping && !running) return Promise.resolve(0);
    // One delivery pass at a time in this process.
    running ??= deliverUpTo(Math.max(1, Math.floor(options.limit ?? BATCH))).finally(() => (running = undefined));
    return running;
  }

  const loop = () =>
    void deliverPending().catch((err) =>
      // A database restart or failover: the next pass retries; not an error of ours.
      isConnectionLost(err) ? logger.warn('mail delivery paused: database connection lost', { err }) : logger.error('mail delivery loop failed', { err }),
    );

  return {
    async enqueue(handle, mail) {
      const [row] = await rows<{ id: string }>(
        handle,
        sql`insert into mail_outbox (to_address, subject, text_body, html_body, created_at, next_attempt_at)
            values (${mail.to}, ${mail.subject}, ${mail.text}, ${mail.html ?? null}, ${clock.now()}, ${clock.now()})
            returning id`,
      );
      // Try soon after the caller's transaction has (probably) committed; the poll catches the rest.
      if (timer && !kickTimer) kickTimer = setTimeout(() => ((kickTimer = undefined), loop()), 20);
      return { id: row!.id };
    },
    deliverPending,
    start() {
      stopping = false;
      if (timer) return;
      timer = setInterval(loop, pollMs);
      (timer as { unref?: () => void }).unref?.();
    },
    async stop() {
      stopping = true;
      if (timer) clearInterval(timer);
      if (kickTimer) clearTimeout(kickTimer);
      timer = undefined;
      kickTimer = undefined;
      // The pass under way finishes its send in flight, records it and hands the rest back (deliverOnce). Bounded: a
      // query stuck on a dead connection must not hold shutdown.
      let bound: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([running?.catch(() => {}), new Promise((r) => (bound = setTimeout(r, sendDeadlineMs + STOP_GRACE_MS)))]);
      clearTimeout(bound);
    },
  };
}

function logTransport(config: Config, logger: Logger, files: MailFiles | undefined): MailTransport {
  return {
    kind: 'log',
    async send(mail) {
      // The file is a convenience: a mail that cannot be written is still logged and kept in the outbox.
      const file = await files?.write(mail).catch((err: unknown) => {
        logger.warn('mail file not written', { mailId: mail.id, error: (err as Error).message });
        return undefined;
      });
      logger.info('mail (SMTP_URL unset: logged, kept in mail_outbox)', {
        to: mail.to,
        subject: mail.subject,
        ...(file ? { file } : {}),
        ...(config.isProduction ? {} : { text: mail.text }),
      });
    },
  };
}

/**
 * Runs `send` and settles by `ms` at the latest: at the deadline its signal aborts (the transport lets go of its
 * connection) and this rejects, whether or not the transport honours the signal.
 */
async function sendWithin(ms: number, send: (signal: AbortSignal) => Promise<void>): Promise<void> {
  const deadline = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new Error(`the mail server did not complete the send within ${Math.round(ms / 1000)} s`);
      deadline.abort(err);
      reject(err);
    }, ms);
  });
  const sending = send(deadline.signal);
  // Whatever the abandoned send does later is of no interest (and must not be an unhandled rejection).
  sending.catch(() => {});
  try {
    await Promise.race([sending, expired]);
  } finally {
    clearTimeout(timer);
  }
}

function smtpTransport(url: string): MailTransport {
  let transporter: Promise<{ sendMail(m: unknown): Promise<unknown> }> | undefined;
  return {
    kind: 'smtp',
    async send(mail, signal) {
      // nodemailer is Node-only: loaded on first send, never by the edge bundle's static graph.
      transporter ??= import('nodemailer').then((m) => m.default.createTransport({ url, ...SMTP_TIMEOUTS }));
      // nodemailer (10.x) closes the SMTP connection when `signal` aborts.
      await (await transporter).sendMail({ from: mail.from, to: mail.to, subject: mail.subject, text: mail.text, html: mail.html, messageId: messageIdOf(mail), signal });
    },
  };
}
