import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMailer, type MailTransport } from '../../functions/platform/mailer.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { mailsTo } from '../support/mail.ts';

/**
 * Found by the fault drill (scripts/chaos): a mail went out over SMTP, then the write recording it as sent failed on
 * a connection the database had just ended; the mailer took that for a failed delivery, scheduled a retry, and the
 * mail arrived twice. Here the transport "sends" and then the server ends every connection of the app's pool
 * (what a restart or failover does) before the mailer records it: the mail must be recorded as sent and never sent
 * again, however often the outbox is drained afterwards.
 */

let t: TestApp;
let admin: postgres.Sql;
beforeAll(async () => {
  t = await startTestApp();
  admin = postgres(t.databaseUrl!, { max: 1, onnotice: () => {} });
});
afterAll(async () => {
  await admin?.end();
  await t?.close();
});

describe('a mail whose "sent" record hits a lost connection', () => {
  it('is recorded as sent on a fresh connection and never sent again', async () => {
    const database = new URL(t.databaseUrl!).pathname.slice(1);
    const sent: string[] = [];
    let cutAfterSend = true;
    const transport: MailTransport = {
      kind: 'smtp',
      async send(mail) {
        sent.push(mail.to);
        if (cutAfterSend) {
          cutAfterSend = false;
          const ended = await admin`select pg_terminate_backend(pid) from pg_stat_activity
                                     where datname = ${database} and application_name = 'agent-marketplace'`;
          expect(ended.length).toBeGreaterThan(0);
        }
      },
    };
    const mailer = createMailer({ config: t.deps.config, db: t.db, logger: t.deps.logger, clock: t.clock, transport });
    await mailer.enqueue(t.db, { to: 'cut-after-send@example.test', subject: 'Once', text: 'only once' });

    await mailer.deliverPending();
    expect(sent).toEqual(['cut-after-send@example.test']);
    expect((await mailsTo(t, 'cut-after-send@example.test'))[0]).toMatchObject({ status: 'sent', attempts: 1, lastError: null });

    // Past any backoff and any lease: still once.
    for (const minutes of [1, 10, 60]) {
      t.clock.advance(minutes * 60_000);
      await mailer.deliverPending();
    }
    expect(sent).toEqual(['cut-after-send@example.test']);
  });
});
