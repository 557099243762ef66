import type { z } from '@hono/zod-openapi';
import { conflict, isUniqueViolation, notFound } from '../http/errors.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { notificationRecipientSchema } from './schemas.ts';
import { iso } from './schemas.ts';

/** Who gets an email when someone requests a demo. Emails are stored lower-cased and unique. */

export type NotificationRecipient = z.infer<typeof notificationRecipientSchema>;

interface Row {
  id: string;
  email: string;
  name: string | null;
  createdAt: Date | string;
  updatedAt: Date | string;
}
const columns = sql`id, email, name, created_at as "createdAt", updated_at as "updatedAt"`;
const toRecipient = (r: Row): NotificationRecipient => ({ ...r, createdAt: iso(r.createdAt), updatedAt: iso(r.updatedAt) });

const duplicate = (err: unknown, email: string | undefined): never => {
  if (isUniqueViolation(err)) throw conflict('This email is already a notification recipient', { email });
  throw err;
};

export async function listRecipients(db: Db): Promise<NotificationRecipient[]> {
  const found = await rows<Row>(db, sql`select ${columns} from public.notification_recipients order by created_at desc, id desc`);
  return found.map(toRecipient);
}

export async function addRecipient(db: Db, input: { email: string; name?: string | undefined }, now: Date): Promise<NotificationRecipient> {
  const email = input.email.trim().toLowerCase();
  try {
    const row = await first<Row>(
      db,
      sql`insert into public.notification_recipients (email, name, created_at, updated_at)
          values (${email}, ${input.name || null}, ${now}, ${now}) returning ${columns}`,
    );
    return toRecipient(row!);
  } catch (err) {
    return duplicate(err, email);
  }
}

export async function updateRecipient(
  db: Db,
  id: string,
  patch: { email?: string | undefined; name?: string | null | undefined },
  now: Date,
): Promise<NotificationRecipient> {
  const email = patch.email?.trim().toLowerCase();
  let row: Row | undefined;
  try {
    row = await first<Row>(
      db,
      sql`update public.notification_recipients set
            email = coalesce(${email ?? null}, email),
            name = case when ${patch.name !== undefined} then ${patch.name || null} else name end,
            updated_at = ${now}
          where id = ${id} returning ${columns}`,
    );
  } catch (err) {
    duplicate(err, email);
  }
  if (!row) throw notFound('Notification recipient', { recipientId: id });
  return toRecipient(row);
}

export async function removeRecipient(db: Db, id: string): Promise<{ id: string }> {
  const row = await first<{ id: string }>(db, sql`delete from public.notification_recipients where id = ${id} returning id`);
  if (!row) throw notFound('Notification recipient', { recipientId: id });
  return row;
}

/** Every recipient's email (for the demo-request mail). */
export async function recipientEmails(db: Db): Promise<string[]> {
  const found = await rows<{ email: string }>(db, sql`select email from public.notification_recipients order by created_at, id`);
  return found.map((r) => r.email);
}
