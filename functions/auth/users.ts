import { z } from '@hono/zod-openapi';
import { notFound } from '../http/errors.ts';
import { first, sql, type Db } from '../platform/db.ts';

/** A marketplace user as the API shows it (GET /me and the admin user controls). */
export const userSchema = z
  .object({
    id: z.string(),
    email: z.string(),
    name: z.string(),
    role: z.enum(['user', 'platform_admin']),
    banned: z.boolean(),
    createdAt: z.string().openapi({ example: '2026-11-22T05:00:00.000Z' }),
  })
  .openapi('User');

export type UserDto = z.infer<typeof userSchema>;

export const bannedUserSchema = userSchema
  .extend({ banReason: z.string().nullable() })
  .openapi('UserWithBan');

/** A row of the auth library's "user" table, as selected for toUserDto. */
export interface UserRow {
  id: string;
  email: string;
  name: string;
  role: string | null;
  banned: boolean | null;
  banReason: string | null;
  createdAt: Date | string;
}

export function toUserDto(row: UserRow): UserDto & { banReason: string | null } {
  return {
    id: row.id,
    email: row.email,
    name: row.name,
    role: row.role === 'platform_admin' ? 'platform_admin' : 'user',
    banned: row.banned === true,
    // The reason of a ban in force only: a temporary ban past its time keeps its columns until the next sign-in.
    banReason: row.banned === true ? row.banReason : null,
    createdAt: new Date(row.createdAt).toISOString(),
  };
}

/**
 * Whether the account is banned now: the column, unless the library's temporary ban (`banExpires`) has passed (the
 * library lifts it only at the next sign-in; the raw column showed an ended ban as banned: review 50). The columns are
 * named unqualified, so it reads "user" aliased or not.
 */
export const BANNED_NOW = sql`public.banned_at(banned, "banExpires", now())`;

/** One user by id, or a 404. */
export async function getUser(db: Db, userId: string) {
  const row = await first<UserRow>(
    db,
    sql`select id, email, name, role, ${BANNED_NOW} as banned, "banReason", "createdAt" from "user" where id = ${userId}`,
  );
  if (!row) throw notFound('User', { userId });
  return toUserDto(row);
}
