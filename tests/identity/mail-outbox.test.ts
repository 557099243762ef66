import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { deliverMail, mailsTo } from '../support/mail.ts';
import { startSmtpServer, type TestSmtpServer } from '../support/smtp.ts';

/**
 * The mail outbox: mail commits with the caller's transaction, is delivered over real SMTP, and survives the
 * mail server being down (retried with backoff, measured on the service clock).
 */
let t: TestApp;
let smtp: TestSmtpServer;
beforeAll(async () => {
  smtp = await startSmtpServer();
  t = await startTestApp({ env: { SMTP_URL: smtp.url } });
});
afterAll(async () => {
  await t.close();
  await smtp.close();
});

describe('mail outbox', () => {
  it('a mail enqueued in a transaction that rolls back is never sent', async () => {
    await expect(
      t.db.transaction().execute(async (trx) => {
        await t.deps.mailer.enqueue(trx, { to: 'rolled-back@example.test', subject: 'never', text: 'never' });
        throw new Error('abort');
      }),
    ).rejects.toThrow('abort');
    await deliverMail(t);
    expect(await mailsTo(t, 'rolled-back@example.test')).toEqual([]);
    expect(smtp.received.some((m) => m.to.includes('rolled-back@example.test'))).toBe(false);
  });

  it('delivers a committed mail over SMTP once', async () => {
    await t.deps.mailer.enqueue(t.db, { to: 'once@example.test', subject: 'Hello once', text: 'body text', html: '<p>body</p>' });
    const before = smtp.received.length;
    await deliverMail(t);
    await smtp.waitFor(before + 1);
    await deliverMail(t);
    expect(smtp.received.filter((m) => m.to.includes('once@example.test'))).toHaveLength(1);
    expect((await mailsTo(t, 'once@example.test'))[0]).toMatchObject({ status: 'sent', attempts: 1, lastError: null });
  });

  it('sends a mail again with the same Message-ID (its outbox row), so a mailbox that had it shows one mail, not two', async () => {
    // A send whose answer never came (its deadline passed after the server had taken the mail) is sent again.
    await t.deps.mailer.enqueue(t.db, { to: 'again@example.test', subject: 'Hello again', text: 'body text' });
    const [queued] = await mailsTo(t, 'again@example.test');
    const before = smtp.received.length;
    await deliverMail(t);
    await smtp.waitFor(before + 1);
    await sql`update mail_outbox set status = 'pending', sent_at = null, next_attempt_at = now() - interval '1 second', claim_id = null
               where id = ${queued!.id}`.execute(t.db);
    await deliverMail(t);
    await smtp.waitFor(before + 2);
    const copies = smtp.received.filter((m) => m.to.includes('again@example.test'));
    expect(copies.map((m) => /^Message-ID: (.*)$/im.exec(m.raw)?.[1]?.trim())).toEqual(Array(2).fill(`<${queued!.id}@localhost>`));
  });

  it('keeps a mail pending while the server refuses it and delivers it on a later attempt', async () => {
    smtp.setFailing(true);
    await t.deps.mailer.enqueue(t.db, { to: 'retry@example.test', subject: 'Retry me', text: 'x' });
    await deliverMail(t);
    const failed = (await mailsTo(t, 'retry@example.test'))[0]!;
    expect(failed).toMatchObject({ status: 'pending', attempts: 1 });
    expect(failed.lastError).toMatch(/451|try again/i);

    // Not due yet: nothing is attempted before the backoff has passed.
    await deliverMail(t);
    expect((await mailsTo(t, 'retry@example.test'))[0]!.attempts).toBe(1);

    smtp.setFailing(false);
    t.clock.advance(5 * 60_000);
    const before = smtp.received.length;
    await deliverMail(t);
    await smtp.waitFor(before + 1);
    expect((await mailsTo(t, 'retry@example.test'))[0]).toMatchObject({ status: 'sent', attempts: 2, lastError: null });
  });

  it('records when each mail was sent', async () => {
    await t.deps.mailer.enqueue(t.db, { to: 'stamp@example.test', subject: 'Stamp', text: 'x' });
    await deliverMail(t);
    const row = await first<{ sent_at: Date | null }>(t.db, sql`select sent_at from mail_outbox where to_address = 'stamp@example.test'`);
    expect(row!.sent_at).not.toBeNull();
  });
});
