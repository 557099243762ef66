import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';
import { insertUser } from '../metering/support.ts';

/**
 * public.bearer_caller: the database half of bearer authentication, shared by the authenticator (every bearer
 * route) and the one-statement metering call. Its verdicts, called directly, including the ones HTTP tests
 * reach only through other rules (a ban also writes a `user:` revocation, so 'banned' alone is seen here).
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

const now = new Date('2026-05-01T12:00:00.000Z');
const issuedAt = new Date('2026-05-01T11:00:00.000Z');

async function verdict(userId: string, keys: string[] = [`user:${userId}`, 'jti:j1', 'grant:g1']): Promise<string> {
  const { rows } = await sql<{ status: string }>`select status from public.bearer_caller(${userId}, ${keys}::text[], ${issuedAt}, ${now})`.execute(
    db.database.db,
  );
  expect(rows).toHaveLength(1);
  return rows[0]!.status;
}

async function revoke(key: string, issuedBefore: Date | null) {
  await sql`insert into revoked_tokens (key, expires_at, issued_before) values (${key}, ${new Date('2026-05-02T00:00:00Z')}, ${issuedBefore})`.execute(
    db.database.db,
  );
}

describe('public.bearer_caller', () => {
  it("answers 'ok' with the user's row for a live user and an unrevoked token", async () => {
    const id = await insertUser(db.database.db);
    const { rows } = await sql<{ status: string; id: string; email: string }>`
      select status, id, email from public.bearer_caller(${id}, ${[`user:${id}`]}::text[], ${issuedAt}, ${now})`.execute(db.database.db);
    expect(rows).toEqual([{ status: 'ok', id, email: `${id}@example.test` }]);
  });

  it("answers 'no_user' (one row, no user columns) for a user that does not exist", async () => {
    expect(await verdict('u_nobody')).toBe('no_user');
  });

  it("answers 'banned' during a ban and 'ok' once it has expired; a ban without an end lasts", async () => {
    const id = await insertUser(db.database.db);
    // set without the trigger's revocation row, so only the ban itself decides here
    await sql`alter table "user" disable trigger user_banned_revoke_credentials`.execute(db.database.db);
    try {
      await sql`update "user" set banned = true, "banExpires" = ${new Date('2026-05-01T13:00:00Z')} where id = ${id}`.execute(db.database.db);
      expect(await verdict(id)).toBe('banned');
      await sql`update "user" set "banExpires" = ${new Date('2026-05-01T12:00:00Z')} where id = ${id}`.execute(db.database.db);
      expect(await verdict(id)).toBe('ok');
      await sql`update "user" set "banExpires" = null where id = ${id}`.execute(db.database.db);
      expect(await verdict(id)).toBe('banned');
    } finally {
      await sql`alter table "user" enable trigger user_banned_revoke_credentials`.execute(db.database.db);
    }
  });

  it("answers 'revoked' for any of the token's keys, and honours issued_before", async () => {
    const a = await insertUser(db.database.db);
    await revoke(`jti:${a}-token`, null);
    expect(await verdict(a, [`user:${a}`, `jti:${a}-token`])).toBe('revoked');
    expect(await verdict(a, [`user:${a}`, `jti:${a}-other`])).toBe('ok');

    const b = await insertUser(db.database.db);
    await revoke(`user:${b}`, new Date('2026-05-01T11:30:00Z'));
    expect(await verdict(b)).toBe('revoked'); // issued 11:00, before the cut
    await sql`update revoked_tokens set issued_before = ${new Date('2026-05-01T10:30:00Z')} where key = ${`user:${b}`}`.execute(db.database.db);
    expect(await verdict(b)).toBe('ok'); // issued after the cut: a token obtained later
  });
});
