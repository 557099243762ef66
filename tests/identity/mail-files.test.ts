import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp, type TestAppOptions } from '../support/app.ts';
import { deliverMail, linkIn, mailsTo } from '../support/mail.ts';
import { startSmtpServer, type TestSmtpServer } from '../support/smtp.ts';
import { signUp } from '../support/users.ts';

/**
 * Without SMTP the mails are only logged (their tokens redacted) and kept in the outbox, which a newcomer on the
 * embedded database cannot read while the service runs; so outside production each logged mail is also written
 * whole to a file (`npm start`: .data/mail/, here a temporary directory), readable by its owner only, and the log
 * line names it (functions/platform/mail-files.ts). In production, or with SMTP, no mail is ever written to disk.
 */

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'mkt-mail-files-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** An app whose mails may go to `<root>/<name>` (a directory that does not exist yet), and a reset mail it handled. */
async function resetMailThrough(name: string, options: TestAppOptions = {}) {
  const dir = join(root, name);
  const t = await startTestApp({ ...options, mailDir: dir });
  const email = `files-${name}-${Date.now()}@example.test`;
  const up = await t.http.post('/api/auth/sign-up/email', { json: { email, password: 'files password 1', name: 'F' } });
  expect(up.status).toBe(200);
  const asked = await t.http.post('/api/auth/request-password-reset', {
    json: { email, redirectTo: `${options.env?.PUBLIC_BASE_URL ?? t.baseUrl}/reset-password` },
  });
  expect(asked.status).toBe(200);
  await deliverMail(t);
  const mails = await mailsTo(t, email);
  expect(mails.map((m) => m.subject)).toEqual(expect.arrayContaining([expect.stringMatching(/confirm/i), expect.stringMatching(/reset/i)]));
  return { t, dir, email, mails };
}

describe('without SMTP, outside production', () => {
  it('writes each logged mail whole to <dir>/<time>-<id>.eml (file 600, directory 700); the log line names it and keeps the token out', async () => {
    const { t, dir, email, mails } = await resetMailThrough('development');
    try {
      expect(statSync(dir).mode & 0o777).toBe(0o700);
      const files = readdirSync(dir);
      expect(files).toHaveLength(mails.length);
      for (const mail of mails) {
        const name = files.find((f) => f.endsWith(`-${mail.id}.eml`));
        expect(name, mail.subject).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z-[0-9a-f-]{36}\.eml$/);
        const path = join(dir, name!);
        expect(statSync(path).mode & 0o777).toBe(0o600);
        const text = readFileSync(path, 'utf8');
        const [head, body] = [text.slice(0, text.indexOf('\n\n')), text.slice(text.indexOf('\n\n') + 2)];
        expect(head.split('\n')).toEqual(
          expect.arrayContaining([
            'From: Agent Marketplace <no-reply@localhost>',
            `To: ${email}`,
            `Subject: ${mail.subject}`,
            expect.stringMatching(/^Date: \w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/),
          ]),
        );
        expect(body).toBe(mail.text);
        const line = t.logs.find((l) => l.file === path);
        expect(line, `the log line naming ${path}`).toMatchObject({ to: email, subject: mail.subject });
      }

      // The file's reset link is the working one; the logs hold neither it nor its token.
      const reset = mails.find((m) => /reset/i.test(m.subject))!;
      const fileText = readFileSync(join(dir, files.find((f) => f.endsWith(`-${reset.id}.eml`))!), 'utf8');
      const link = linkIn({ text: fileText.slice(fileText.indexOf('\n\n')) });
      const token = link.pathname.split('/').pop()!;
      expect(JSON.stringify(t.logs)).not.toContain(token);
      const opened = await t.http.get(link.pathname + link.search);
      expect(opened.status).toBe(302);
      expect(new URL(opened.headers.get('location')!).searchParams.get('token')).toBe(token);
    } finally {
      await t.close();
    }
  });
});

describe('never in production, never with SMTP', () => {
  let smtp: TestSmtpServer;
  beforeAll(async () => {
    smtp = await startSmtpServer();
  });
  afterAll(() => smtp?.close());

  it('attack: a production service given a mail directory writes nothing to it (the reset link stays in the outbox only)', async () => {
    const { t, dir, email, mails } = await resetMailThrough('production', {
      env: { NODE_ENV: 'production', PUBLIC_BASE_URL: 'https://api.market.example' },
    });
    try {
      expect(mails.every((m) => m.status === 'logged')).toBe(true);
      expect(existsSync(dir)).toBe(false);
      const lines = t.logs.filter((l) => l.to === email);
      expect(lines.length).toBe(mails.length);
      for (const line of lines) {
        expect(line.file).toBeUndefined();
        expect(line.text).toBeUndefined();
      }
    } finally {
      await t.close();
    }
  });

  it('with SMTP_URL the mail goes over SMTP and no file is written', async () => {
    const { t, dir, email, mails } = await resetMailThrough('smtp', { env: { SMTP_URL: smtp.url } });
    try {
      expect(mails.every((m) => m.status === 'sent')).toBe(true);
      expect(smtp.received.filter((m) => m.to.includes(email))).toHaveLength(mails.length);
      expect(existsSync(dir)).toBe(false);
    } finally {
      await t.close();
    }
  });
});
