import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClock } from '../../functions/platform/clock.ts';
import { first, sql } from '../../functions/platform/db.ts';
import { createMailer, LEASE_MS, PASS_BUDGET_MS, SEND_DEADLINE_MS, type MailTransport } from '../../functions/platform/mailer.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually } from '../support/databases.ts';
import { expireMailLeases, mailsTo } from '../support/mail.ts';

/**
 * A mail server that answers at a trickle, and a mail whose lease ran out under its send (review 31;
 * functions/platform/mailer.ts, migration 20261126001600).
 *
 * A claimed mail is leased for LEASE_MS, and the lease was meant to outlast any send: nodemailer's timeouts bound only
 * the connection, the greeting and each silence, though, so a server that keeps sending a line of its answer every 2 s
 * held a send for ever. The lease ran out under it and another instance sent the mail again; the stuck send's failure,
 * recorded later, put the mail back to `pending` over the other's `sent` (a third send); and the process's one delivery
 * pass, shared by every caller, sent nothing else meanwhile.
 *
 * Now a whole send is abandoned after SEND_DEADLINE_MS (the SMTP connection closed), well inside the lease, and each
 * claim carries a claim_id: a holder whose lease ran out can no longer undo what the next holder recorded.
 *
 * Leases are in the database's clock (review 25; platform/lease.ts), which a test cannot move: a lease is made to run
 * out with expireMailLeases, while retries stay due by the service's clock, which the tests move.
 */

interface Tarpit {
  url: string;
  /** Resolves when a client has said EHLO and the tarpit started its endless answer. */
  stalled: Promise<void>;
  /** Connections open right now. */
  open(): number;
  close(): Promise<void>;
}

/** An SMTP server that greets, then answers EHLO one `250-` line every 2 s, never its last line. */
async function startTarpit(): Promise<Tarpit> {
  const sockets = new Set<Socket>();
  const timers = new Set<ReturnType<typeof setInterval>>();
  let onStalled!: () => void;
  const stalled = new Promise<void>((r) => (onStalled = r));
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
    socket.write('220 tarpit.test ESMTP\r\n');
    let buffered = '';
    socket.on('data', (chunk) => {
      buffered += chunk.toString('utf8');
      if (/^(EHLO|HELO) /im.test(buffered)) {
        buffered = '';
        socket.write('250-tarpit.test at your service\r\n');
        const timer = setInterval(() => socket.write('250-still thinking\r\n'), 2_000);
        timers.add(timer);
        socket.on('close', () => clearInterval(timer));
        onStalled();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `smtp://127.0.0.1:${(server.address() as AddressInfo).port}`,
    stalled,
    open: () => sockets.size,
    close: async () => {
      for (const timer of timers) clearInterval(timer);
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

let t: TestApp;
let tarpit: Tarpit;

beforeAll(async () => {
  tarpit = await startTarpit();
  t = await startTestApp({ now: '2026-04-01T09:00:00.000Z' });
}, 60_000);

afterAll(async () => {
  await tarpit?.close();
  await t?.close();
});

const sleep = (ms: number) => new Promise<'no answer'>((r) => setTimeout(() => r('no answer'), ms));

async function outboxRow(id: string) {
  return first<{ status: string; attempts: number; last_error: string | null; claim_id: string | null; next_attempt_at: Date }>(
    t.db,
    sql`select status, attempts, last_error, claim_id, next_attempt_at from mail_outbox where id = ${id}`,
  );
}

/** A transport whose sends wait until the test lets each one go, succeeding or failing. */
function heldTransport() {
  const sent: string[] = [];
  const waiting: Array<{ to: string; settle: (err?: Error) => void }> = [];
  const transport: MailTransport = {
    kind: 'smtp',
    send: (mail) =>
      new Promise<void>((resolve, reject) => {
        waiting.push({
          to: mail.to,
          settle: (err) => {
            if (err) return reject(err);
            sent.push(mail.to);
            resolve();
          },
        });
      }),
  };
  return { transport, sent, waiting };
}

describe('a send to a mail server that answers at a trickle', () => {
  it('is abandoned at its deadline, its connection closed, and the mail retried later', async () => {
    const mailer = createMailer({
      config: { ...t.deps.config, smtp: { url: tarpit.url, from: 'noreply@example.test' } },
      db: t.db,
      logger: t.deps.logger,
      clock: t.clock,
      sendDeadlineMs: 1_500,
    });
    const { id } = await mailer.enqueue(t.db, { to: 'trickle@example.test', subject: 'Reset your password', text: 'https://example.test/reset?token=secret' });

    const pass = mailer.deliverPending();
    await tarpit.stalled;
    // The tarpit never stops talking, so only the send's own deadline ends it (generous bound: a loaded machine).
    const handled = await Promise.race([pass, sleep(20_000)]);
    expect(handled, 'the delivery pass did not settle').toBe(1);
    await eventually('the tarpit saw its connection closed', async () => tarpit.open() === 0);

    const row = await outboxRow(id);
    expect(row).toMatchObject({ status: 'pending', attempts: 1, claim_id: null });
    expect(row!.last_error).toMatch(/did not complete the send within/);
    // Retried after its backoff (2^1 s), long before the lease it held would have ended.
    expect(new Date(row!.next_attempt_at).getTime()).toBe(t.clock.now().getTime() + 2_000);
    // Out of the way of the tests below, whose clocks move past its retry.
    await sql`delete from mail_outbox where id = ${id}`.execute(t.db);
  }, 40_000);

  it('ends well inside the lease: no other instance can claim a mail while its send may still be going', () => {
    // A pass starts no send after PASS_BUDGET_MS; a send ends by SEND_DEADLINE_MS; the outcome needs a moment to be written.
    expect(PASS_BUDGET_MS + SEND_DEADLINE_MS + 30_000).toBeLessThanOrEqual(LEASE_MS);
  });
});

describe('a holder whose lease ran out under its send', () => {
  it("cannot put back to pending a mail the next holder sent (its failure is not recorded)", async () => {
    const late = heldTransport();
    const next = heldTransport();
    const a = createMailer({ config: t.deps.config, db: t.db, logger: t.deps.logger, clock: t.clock, transport: late.transport });
    const b = createMailer({ config: t.deps.config, db: t.db, logger: t.deps.logger, clock: t.clock, transport: next.transport });
    const { id } = await a.enqueue(t.db, { to: 'late-failure@example.test', subject: 'Once', text: 'only once' });

    const passA = a.deliverPending();
    await eventually('instance A is sending', async () => late.waiting.length === 1);
    // A stalls past its lease (a frozen process); B claims the mail and sends it.
    await expireMailLeases(t);
    const passB = b.deliverPending();
    await eventually('instance B is sending', async () => next.waiting.length === 1);
    next.waiting[0]!.settle();
    expect(await passB).toBe(1);
    expect(await outboxRow(id)).toMatchObject({ status: 'sent', attempts: 2, claim_id: null });

    // A's send finally fails: the mail stays sent.
    late.waiting[0]!.settle(new Error('421 service closing'));
    expect(await passA).toBe(1);
    expect(await outboxRow(id)).toMatchObject({ status: 'sent', attempts: 2, last_error: null });

    // However often the outbox is drained afterwards, nothing goes out again.
    for (const minutes of [1, 10, 60]) {
      t.clock.advance(minutes * 60_000);
      await Promise.all([a.deliverPending(), b.deliverPending()]);
    }
    expect({ a: late.waiting.length, b: next.waiting.length, sent: next.sent }).toEqual({ a: 1, b: 1, sent: ['late-failure@example.test'] });
  }, 30_000);

  it('records its own success, and the next holder that fails cannot undo it', async () => {
    const late = heldTransport();
    const next = heldTransport();
    const a = createMailer({ config: t.deps.config, db: t.db, logger: t.deps.logger, clock: t.clock, transport: late.transport });
    const b = createMailer({ config: t.deps.config, db: t.db, logger: t.deps.logger, clock: t.clock, transport: next.transport });
    const { id } = await a.enqueue(t.db, { to: 'late-success@example.test', subject: 'Once', text: 'only once' });

    const passA = a.deliverPending();
    await eventually('instance A is sending', async () => late.waiting.length === 1);
    await expireMailLeases(t);
    const passB = b.deliverPending();
    await eventually('instance B is sending', async () => next.waiting.length === 1);

    // A's send gets through after all: the mail did go out, and that is recorded.
    late.waiting[0]!.settle();
    expect(await passA).toBe(1);
    expect(await outboxRow(id)).toMatchObject({ status: 'sent', claim_id: null });
    // B's send fails: its failure no longer matches a claim, so the mail is not sent a third time.
    next.waiting[0]!.settle(new Error('connection reset'));
    expect(await passB).toBe(1);
    expect(await outboxRow(id)).toMatchObject({ status: 'sent', last_error: null });
    t.clock.advance(60 * 60_000);
    await Promise.all([a.deliverPending(), b.deliverPending()]);
    expect((await mailsTo(t, 'late-success@example.test')).map((m) => m.status)).toEqual(['sent']);
    expect({ a: late.waiting.length, b: next.waiting.length }).toEqual({ a: 1, b: 1 });
  }, 30_000);
});

describe('two instances whose clocks differ by 3 minutes (review 25)', () => {
  it('never both send a mail: the lease is in the database clock, not in either instance’s', async () => {
    // The lease used to be written and compared in each instance's own clock: one whose clock ran ahead of the
    // holder's by more than the lease's slack took a mail the holder was still sending, and sent it too.
    const held = heldTransport();
    const sentByB: string[] = [];
    const a = createMailer({ config: t.deps.config, db: t.db, logger: t.deps.logger, clock: t.clock, transport: held.transport });
    const ahead = new TestClock(new Date(t.clock.now().getTime() + 3 * 60_000));
    const b = createMailer({
      config: t.deps.config,
      db: t.db,
      logger: t.deps.logger,
      clock: ahead,
      transport: { kind: 'smtp', send: async (mail) => void sentByB.push(mail.to) },
    });
    const { id } = await a.enqueue(t.db, { to: 'skewed-clocks@example.test', subject: 'Once', text: 'only once' });

    const passA = a.deliverPending();
    await eventually('instance A is sending', async () => held.waiting.length === 1);
    expect(await b.deliverPending()).toBe(0);
    held.waiting[0]!.settle();
    expect(await passA).toBe(1);
    expect({ sentByB, row: await outboxRow(id) }).toEqual({ sentByB: [], row: expect.objectContaining({ status: 'sent', attempts: 1 }) });
  });
});
