import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { messageIdOf, type MailFiles, type OutgoingMail } from './mailer.ts';

/**
 * Logged mails kept whole as files, for a developer without SMTP: the log line redacts the tokens in a mail's links
 * (logs never hold a secret), and the embedded database that keeps the outbox cannot be opened by another process
 * while the service runs, so without these files a newcomer could not follow a reset or verification link. The
 * mailer uses them outside production only (platform/mailer.ts). Node only: the Node entry and tests inject it; the
 * edge never imports this file.
 *
 * One file per mail, `<dir>/<time>-<mail id>.eml` (From, To, Subject, Date, Message-ID and the text body; any mail
 * program opens it), readable by the owner only (directory 700, file 600): the links in it are credentials.
 */
export function mailFolder(dir: string): MailFiles {
  return {
    async write(mail) {
      // Made again if someone deleted it meanwhile; tightened if it was there with looser rights.
      await mkdir(dir, { recursive: true, mode: 0o700 });
      await chmod(dir, 0o700);
      // The id is the outbox row's uuid, the time has no separator a file name cannot hold: nothing from a user.
      const path = join(dir, `${mail.date.toISOString().replace(/[:.]/g, '-')}-${mail.id}.eml`);
      // `wx`: a new file, never one (or a link) already there.
      await writeFile(path, eml(mail), { mode: 0o600, flag: 'wx' });
      return path;
    },
  };
}

function eml(mail: OutgoingMail): string {
  // Header values on one line each, so no value can add a header of its own.
  const header = (name: string, value: string) => `${name}: ${value.replace(/[\r\n]+/g, ' ')}\n`;
  return (
    header('From', mail.from) +
    header('To', mail.to) +
    header('Subject', mail.subject) +
    header('Date', mail.date.toUTCString()) +
    header('Message-ID', messageIdOf(mail)) +
    header('MIME-Version', '1.0') +
    header('Content-Type', 'text/plain; charset=utf-8') +
    header('Content-Transfer-Encoding', '8bit') +
    `\n${mail.text}`
  );
}
