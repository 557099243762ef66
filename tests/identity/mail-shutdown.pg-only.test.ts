import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../../functions/platform/db.ts';
import { createMailer, type MailTransport } from '../../functions/platform/mailer.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually } from '../support/databases.ts';
import { expireMailLeases, mailsTo } from '../support/mail.ts';

/**
 * An instance shut down while its mail pass sends a batch to a slow mail server (a rolling restart; review 25). The
 * Node entry's shutdown (scripts/serve.ts) calls deps.shutdown(), whose mailer.stop() waited at most 5 s for the pass
 * and returned without telling it to stop, and then closes the database. The pass went on sending the rest of its
 * claimed batch (it starts sends for up to PASS_BUDGET_MS = 20 s) on a closed database: each of those mails went out
 * unrecorded, and another instance sent it again when its lease ran out. Now stop() lets the send in flight finish
 * and be recorded, and the pass hands the rest of its claim back, due at once, for the other instances.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t?.close();
});

describe('an instance shut down while its mail pass is sending a batch to a slow mail server', () => {
  it('starts no send after stop(), hands the rest back at once, and no mail reaches anyone twice', async () => {
    const received: string[] = [];
    const started: string[] = [];
    const sentAfterStop: string[] = [];
    let stopped = false;
    const slow: MailTransport = {
      kind: 'smtp',
      async send(mail) {
        started.push(mail.to);
        if (stopped) sentAfterStop.push(mail.to);
        await new Promise((resolve) => setTimeout(resolve, 1_000)); // a second per mail: a remote relay, no pool
        received.push(mail.to);
      },
    };
    // The instance being shut down, on its own pool as a separate process would have.
    const own = openPostgres(t.databaseUrl!, { max: 4 });
    const leaving = createMailer({ config: t.deps.config, db: own.db, logger: t.deps.logger, clock: t.clock, transport: slow });
    const batch = Array.from({ length: 8 }, (_, i) => `batch-${i}@example.test`);
    for (const to of batch) await leaving.enqueue(t.db, { to, subject: 'Once', text: 'x' });

    const pass = leaving.deliverPending().catch(() => 0);
    await eventually('the first send is under way', async () => started.length > 0);
    // SIGTERM: scripts/serve.ts's order, deps.shutdown() (mailer.stop()) and then database.close().
    await leaving.stop();
    stopped = true;
    await own.close();
    await pass;

    // What the pass did not send is handed back as never tried, due at once: another instance sends it now, not
    // when a lease ends.
    const unsent = batch.length - started.length;
    const handedBack = (await Promise.all(batch.map((to) => mailsTo(t, to)))).filter(([m]) => m!.status === 'pending' && m!.attempts === 0).length;
    // And after the lease of anything still claimed: nothing went out unrecorded, so nothing goes out twice.
    await expireMailLeases(t);
    const fast: MailTransport = { kind: 'smtp', send: async (mail) => void received.push(mail.to) };
    const staying = createMailer({ config: t.deps.config, db: t.db, logger: t.deps.logger, clock: t.clock, transport: fast });
    await staying.deliverPending({ limit: 100 });

    const twice = received.filter((to, i) => received.indexOf(to) !== i);
    expect({ sentAfterStop, twice, handedBack }).toEqual({ sentAfterStop: [], twice: [], handedBack: unsent });
    expect(unsent).toBeGreaterThan(0);
    expect([...received].sort()).toEqual(batch);
  }, 40_000);
});
