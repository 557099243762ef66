import { randomUUID } from 'node:crypto';
import { sql, type Db } from '../../functions/platform/db.ts';

/**
 * A user row inserted directly, for tests of SQL-level metering rules that need no session.
 * HTTP tests sign users up through the real flow (tests/support/users.ts) instead.
 */
export async function insertUser(db: Db, overrides: { role?: 'user' | 'platform_admin' } = {}): Promise<string> {
  const id = `u_${randomUUID().replace(/-/g, '').slice(0, 20)}`;
  await sql`insert into "user" (id, name, email, "emailVerified", role)
            values (${id}, ${'Test ' + id}, ${id + '@example.test'}, true, ${overrides.role ?? 'user'})`.execute(db);
  return id;
}
