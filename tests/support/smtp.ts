import { SMTPServer } from 'smtp-server';
import type { AddressInfo } from 'node:net';

/**
 * A real SMTP server on a loopback port (the `smtp-server` package), for tests that check mail leaves the
 * service over SMTP. It accepts every message (no TLS, no auth) and keeps it; `SMTP_URL` is `smtp://127.0.0.1:<port>`.
 */
export interface ReceivedMail {
  from: string;
  to: string[];
  /** The raw RFC 5322 message. */
  raw: string;
  subject: string;
  /** The body with quoted-printable soft line breaks and escapes undone (enough to find links). */
  body: string;
}

export interface TestSmtpServer {
  url: string;
  received: ReceivedMail[];
  /** Resolves once at least `count` mails have arrived (or rejects after `timeoutMs`). */
  waitFor(count: number, timeoutMs?: number): Promise<ReceivedMail[]>;
  /** Refuse (or accept again) every message with a 451 temporary failure. */
  setFailing(failing: boolean): void;
  close(): Promise<void>;
}

export async function startSmtpServer(): Promise<TestSmtpServer> {
  const received: ReceivedMail[] = [];
  let failing = false;
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        if (failing) {
          const err = Object.assign(new Error('try again later'), { responseCode: 451 });
          return callback(err);
        }
        const raw = Buffer.concat(chunks).toString('utf8');
        received.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          raw,
          subject: /^Subject: (.*)$/m.exec(raw)?.[1]?.trim() ?? '',
          body: decodeQuotedPrintable(raw.slice(raw.indexOf('\r\n\r\n') + 4)),
        });
        callback();
      });
    },
  });
  // Port 0: the kernel picks a free port as it binds (asking first and binding later races with other test files).
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.server.address() as AddressInfo).port;
  return {
    url: `smtp://127.0.0.1:${port}`,
    received,
    setFailing: (f) => void (failing = f),
    async waitFor(count, timeoutMs = 5000) {
      const deadline = Date.now() + timeoutMs;
      while (received.length < count) {
        if (Date.now() > deadline) throw new Error(`expected ${count} mails, got ${received.length}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      return received;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function decodeQuotedPrintable(text: string): string {
  return text.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}
