import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import type { CallResult } from '../support/http.ts';
import { createAdmin, signIn, type TestUser } from '../support/users.ts';

/**
 * The marketplace keeps one admin who can act, whatever two admins do to each other at once (found by a hostile
 * review of the admin room, review 02). "Own demotion -> 403" and "an admin cannot ban themselves" were checked
 * against the role the request was authenticated with, and the write ran later without looking again: two admins
 * demoting or banning each other at the same moment both got 200 and no admin was left. The library's admin endpoints
 * had the same shape. Now the database refuses the later write (trigger `user_keeps_a_platform_admin`, migration
 * 20261127000400), answered 422 INVALID_STATE on every path.
 *
 * The interleaving is forced as in tests/identity/credentials-race.pg-only.test.ts: the test holds both user rows, so
 * both requests are past every check and wait in their write; then it lets them go. (PostgreSQL only: the embedded
 * database serves one statement at a time.)
 */
let t: TestApp;
let locker: postgres.Sql;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-11-20T09:00:00.000Z' });
  locker = postgres(t.databaseUrl!, { max: 1, onnotice: () => {} });
});
afterAll(async () => {
  await locker?.end({ timeout: 1 });
  await t?.close();
});

const origin = () => ({ origin: t.baseUrl });
/** Admins who can still act: role platform_admin and not banned. */
const workingAdmins = async () =>
  (await first<{ n: number }>(t.db, sql`select count(*)::int as n from "user" where role = 'platform_admin' and not coalesce(banned, false)`))!.n;

/** Two fresh admins, and no other admin in this test's database. */
async function onlyTwoAdmins(): Promise<[TestUser, TestUser]> {
  const a = await createAdmin(t);
  const b = await createAdmin(t);
  await sql`update "user" set role = 'user' where role = 'platform_admin' and id not in (${a.userId}, ${b.userId})`.execute(t.db);
  expect(await workingAdmins()).toBe(2);
  return [a, b];
}

/**
 * Runs both calls while the two admins' rows of `table` are held (their user rows, or their sessions: remove-user
 * deletes those first), so both are past every check before either writes.
 */
async function atOnce(
  a: TestUser,
  b: TestUser,
  pattern: string,
  calls: () => [Promise<CallResult>, Promise<CallResult>],
  table: 'user' | 'session' = 'user',
) {
  const held = await holdOpen(locker, (tx) =>
    table === 'user'
      ? tx`select 1 from "user" where id in (${a.userId}, ${b.userId}) order by id for update`
      : tx`select 1 from "session" where "userId" in (${a.userId}, ${b.userId}) order by id for update`,
  );
  let pending: [Promise<CallResult>, Promise<CallResult>] | undefined;
  try {
    pending = calls();
    await eventually('both writes wait', async () => (await statementsWaitingForLock(t.db, pattern)) >= 2);
  } finally {
    await held.release();
  }
  return Promise.all(pending!);
}

/** The later of the two is refused in the envelope (never a 500) and one admin is left who can still sign in. */
async function oneRefusedOneAdminLeft(answers: CallResult[], a: TestUser, b: TestUser) {
  const statuses = answers.map((r) => r.status).sort();
  expect(statuses, answers.map((r) => r.text).join(' / ')).toEqual([200, 422]);
  const refused = answers.find((r) => r.status === 422)!;
  expect(refused.body.error).toMatchObject({ code: 'INVALID_STATE', details: { reason: 'last_platform_admin' } });
  expect(await workingAdmins()).toBe(1);
  const survivor = (await first<{ id: string }>(t.db, sql`select id from "user" where role = 'platform_admin' and not coalesce(banned, false)`))!.id;
  const who = survivor === a.userId ? a : b;
  const again = await signIn(t, { email: who.email, password: who.password });
  expect((await t.http.get('/admin/users', { cookie: again.cookie })).status).toBe(200);
}

describe('the last admin', () => {
  // Was: both demotions answered 200 and no admin was left.
  it('attack on the self-demotion rule: two admins demoting each other at once (PUT /admin/users/{id}/role) leave one admin', async () => {
    const [a, b] = await onlyTwoAdmins();
    const answers = await atOnce(a, b, '%update "user" set role%', () => [
      t.http.put(`/admin/users/${b.userId}/role`, { cookie: a.cookie, json: { role: 'user' }, headers: origin() }),
      t.http.put(`/admin/users/${a.userId}/role`, { cookie: b.cookie, json: { role: 'user' }, headers: origin() }),
    ]);
    await oneRefusedOneAdminLeft(answers, a, b);
  });

  // Was: both bans answered 200 and no admin could sign in.
  it('attack on the self-ban rule: two admins banning each other at once (POST /admin/users/{id}/ban) leave one admin', async () => {
    const [a, b] = await onlyTwoAdmins();
    const answers = await atOnce(a, b, '%update "user" set banned = true%', () => [
      t.http.post(`/admin/users/${b.userId}/ban`, { cookie: a.cookie, headers: origin() }),
      t.http.post(`/admin/users/${a.userId}/ban`, { cookie: b.cookie, headers: origin() }),
    ]);
    await oneRefusedOneAdminLeft(answers, a, b);
  });

  // Was: the library's set-role and ban-user, run at once on each other, both answered 200 and no admin was left.
  it("the library's set-role and ban-user at once on each other leave one admin, and the refusal is a 422, not a 500", async () => {
    const [a, b] = await onlyTwoAdmins();
    const answers = await atOnce(a, b, '%update "user" set%', () => [
      t.http.post('/api/auth/admin/set-role', { cookie: a.cookie, json: { userId: b.userId, role: 'user' }, headers: origin() }),
      t.http.post('/api/auth/admin/ban-user', { cookie: b.cookie, json: { userId: a.userId }, headers: origin() }),
    ]);
    await oneRefusedOneAdminLeft(answers, a, b);
  });

  // Was: the library's update-user changing each other's role at once both answered 200.
  it("the library's update-user demoting each other at once leaves one admin", async () => {
    const [a, b] = await onlyTwoAdmins();
    const answers = await atOnce(a, b, '%update "user" set%', () => [
      t.http.post('/api/auth/admin/update-user', { cookie: a.cookie, json: { userId: b.userId, data: { role: 'user' } }, headers: origin() }),
      t.http.post('/api/auth/admin/update-user', { cookie: b.cookie, json: { userId: a.userId, data: { role: 'user' } }, headers: origin() }),
    ]);
    await oneRefusedOneAdminLeft(answers, a, b);
  });

  // Was: the library's remove-user, run at once on each other, removed both admins; refusing only the user row's
  // deletion left the survivor without a password (the library deletes the accounts first, not in one transaction).
  it("the library's remove-user at once on each other leaves one admin who can sign in", async () => {
    const [a, b] = await onlyTwoAdmins();
    const answers = await atOnce(
      a,
      b,
      '%delete from "session"%',
      () => [
        t.http.post('/api/auth/admin/remove-user', { cookie: a.cookie, json: { userId: b.userId }, headers: origin() }),
        t.http.post('/api/auth/admin/remove-user', { cookie: b.cookie, json: { userId: a.userId }, headers: origin() }),
      ],
      'session',
    );
    await oneRefusedOneAdminLeft(answers, a, b);
  });
});
