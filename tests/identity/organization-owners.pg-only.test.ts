import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import type { CallResult } from '../support/http.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * Every organization keeps an owner, whatever two owners do at once (found by a hostile review of organizations,
 * review 05). The organization plugin counts the owners, then deletes (leave, remove-member) or rewrites
 * (update-member-role of one's own role) the member, with no lock between the two: two owners leaving, removing each
 * other or demoting themselves at once both counted two owners, both got 200, and the organization had no owner for
 * good (only an owner makes an owner). Now the database refuses the later write (trigger `member_keeps_an_owner`,
 * migration 20261127000800), answered as the plugin answers a lone owner: 400 with its code.
 *
 * The interleaving is forced as in last-admin.pg-only.test.ts: the test holds both owners' member rows, so both
 * requests are past the plugin's count and wait in their write; then it lets them go. (PostgreSQL only: the embedded
 * database serves one statement at a time. The rule itself, one request at a time, is in organizations.test.ts.)
 */
let t: TestApp;
let locker: postgres.Sql;
beforeAll(async () => {
  t = await startTestApp();
  locker = postgres(t.databaseUrl!, { max: 1, onnotice: () => {} });
});
afterAll(async () => {
  await locker?.end({ timeout: 1 });
  await t?.close();
});

const asUser = (u: TestUser) => ({ cookie: u.cookie, headers: { origin: t.baseUrl } });

/** An organization owned by two verified accounts (the second invited as `role` by the first, and accepted). */
async function orgWithTwoOwners(role = 'owner') {
  const a = await signUp(t, { verified: true, name: 'Owner A' });
  const b = await signUp(t, { verified: true, name: 'Owner B' });
  const org = await t.http.post('/api/auth/organization/create', { ...asUser(a), json: { name: 'Two owners', slug: `two-${randomUUID().slice(0, 8)}` } });
  expect(org.status, org.text).toBe(200);
  const invitation = await t.http.post('/api/auth/organization/invite-member', { ...asUser(a), json: { email: b.email, role, organizationId: org.body.id } });
  expect(invitation.status, invitation.text).toBe(200);
  const accepted = await t.http.post('/api/auth/organization/accept-invitation', { ...asUser(b), json: { invitationId: invitation.body.id } });
  expect(accepted.status, accepted.text).toBe(200);
  const orgId = org.body.id as string;
  const members = await rows<{ id: string; userId: string }>(t.db, sql`select id, "userId" from member where "organizationId" = ${orgId}`);
  const memberOf = (u: TestUser) => members.find((m) => m.userId === u.userId)!.id;
  return { a, b, orgId, memberOf };
}

const owners = async (orgId: string) =>
  (await rows<{ userId: string }>(t.db, sql`select "userId" from member where "organizationId" = ${orgId} and 'owner' = any (string_to_array(role, ','))`)).length;

/** Runs both calls while the organization's member rows are held, so both are past the plugin's count before either writes. */
async function atOnce(orgId: string, pattern: string, calls: () => [Promise<CallResult>, Promise<CallResult>]) {
  const held = await holdOpen(locker, (tx) => tx`select 1 from member where "organizationId" = ${orgId} order by id for update`);
  let pending: [Promise<CallResult>, Promise<CallResult>] | undefined;
  try {
    pending = calls();
    await eventually('both writes wait', async () => (await statementsWaitingForLock(t.db, pattern)) >= 2);
  } finally {
    await held.release();
  }
  return Promise.all(pending!);
}

/** One of the two went through, the other is refused as the plugin refuses a lone owner, and one owner is left. */
async function oneRefusedOneOwnerLeft(answers: CallResult[], orgId: string, code: string) {
  expect(answers.map((r) => r.status).sort(), answers.map((r) => r.text).join(' / ')).toEqual([200, 400]);
  expect(answers.find((r) => r.status === 400)!.body).toMatchObject({ code });
  expect(await owners(orgId)).toBe(1);
  expect(t.logs.filter((l) => l.level === 'error')).toEqual([]);
}

describe('the last owner of an organization', () => {
  // Was: both 200, no owner left.
  it('attack: two owners leaving at once leave one owner; the later is refused 400 like a lone owner', async () => {
    const { a, b, orgId } = await orgWithTwoOwners();
    const answers = await atOnce(orgId, '%delete from "member"%', () => [
      t.http.post('/api/auth/organization/leave', { ...asUser(a), json: { organizationId: orgId } }),
      t.http.post('/api/auth/organization/leave', { ...asUser(b), json: { organizationId: orgId } }),
    ]);
    await oneRefusedOneOwnerLeft(answers, orgId, 'YOU_CANNOT_LEAVE_THE_ORGANIZATION_AS_THE_ONLY_OWNER');
  });

  // Was: both 200, no owner left.
  it('attack: two owners removing each other at once leave one owner', async () => {
    const { a, b, orgId, memberOf } = await orgWithTwoOwners();
    const answers = await atOnce(orgId, '%delete from "member"%', () => [
      t.http.post('/api/auth/organization/remove-member', { ...asUser(a), json: { memberIdOrEmail: memberOf(b), organizationId: orgId } }),
      t.http.post('/api/auth/organization/remove-member', { ...asUser(b), json: { memberIdOrEmail: memberOf(a), organizationId: orgId } }),
    ]);
    await oneRefusedOneOwnerLeft(answers, orgId, 'YOU_CANNOT_LEAVE_THE_ORGANIZATION_AS_THE_ONLY_OWNER');
  });

  // Was: both 200, both admins, no owner left.
  it('attack: two owners demoting themselves at once (update-member-role) leave one owner', async () => {
    const { a, b, orgId, memberOf } = await orgWithTwoOwners();
    const answers = await atOnce(orgId, '%update "member" set%', () => [
      t.http.post('/api/auth/organization/update-member-role', { ...asUser(a), json: { memberId: memberOf(a), role: 'admin', organizationId: orgId } }),
      t.http.post('/api/auth/organization/update-member-role', { ...asUser(b), json: { memberId: memberOf(b), role: 'admin', organizationId: orgId } }),
    ]);
    await oneRefusedOneOwnerLeft(answers, orgId, 'YOU_CANNOT_LEAVE_THE_ORGANIZATION_WITHOUT_AN_OWNER');
  });

  it('an owner whose role is a list ("owner,admin") counts as an owner: leaving at once beside a plain owner leaves one', async () => {
    const { a, b, orgId } = await orgWithTwoOwners('owner,admin');
    const answers = await atOnce(orgId, '%delete from "member"%', () => [
      t.http.post('/api/auth/organization/leave', { ...asUser(a), json: { organizationId: orgId } }),
      t.http.post('/api/auth/organization/leave', { ...asUser(b), json: { organizationId: orgId } }),
    ]);
    await oneRefusedOneOwnerLeft(answers, orgId, 'YOU_CANNOT_LEAVE_THE_ORGANIZATION_AS_THE_ONLY_OWNER');
  });

  it('sent freely (no held rows), five pairs of leaving owners each leave one owner', async () => {
    const outcomes: Array<{ statuses: number[]; owners: number }> = [];
    for (let round = 0; round < 5; round++) {
      const { a, b, orgId } = await orgWithTwoOwners();
      const answers = await Promise.all([a, b].map((u) => t.http.post('/api/auth/organization/leave', { ...asUser(u), json: { organizationId: orgId } })));
      outcomes.push({ statuses: answers.map((r) => r.status).sort(), owners: await owners(orgId) });
    }
    expect(outcomes).toEqual(Array(5).fill({ statuses: [200, 400], owners: 1 }));
  });
});
