import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import type { CallResult } from '../support/http.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * An account a platform admin removes hands each organization it owned alone to the best remaining member, also when
 * that member leaves or is removed at the same moment (found by review 10). The first hand-over (20261127001000) read
 * its heir with a plain select and then set the heir's role, with nothing holding the heir's row between: the heir
 * leaving then made the update match no row, and the heir's own removal deleted the row just made the owner; either
 * way both requests answered 200 and the other members were left with no owner for good (nobody could invite, change
 * a role or delete the organization). Now the hand-over runs in the owner rule where an owner's row goes with its
 * account, takes the heir FOR UPDATE and takes the next one if the heir goes (migration 20261127001500).
 *
 * The interleaving is forced as in organization-owners.pg-only.test.ts: the test holds the heir's member row so that
 * both requests are in their writes before either goes on. (PostgreSQL only: the embedded database serves one
 * statement at a time. The hand-over one request at a time, and banned members, are in organizations.test.ts.)
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
const verifiedUser = (name: string) => signUp(t, { name, verified: true });

async function createOrg(owner: TestUser) {
  const res = await t.http.post('/api/auth/organization/create', { ...asUser(owner), json: { name: 'Handed Co', slug: `hand-${randomUUID().slice(0, 8)}` } });
  expect(res.status, res.text).toBe(200);
  return res.body.id as string;
}
async function join(inviter: TestUser, orgId: string, invitee: TestUser, role: string) {
  const inv = await t.http.post('/api/auth/organization/invite-member', { ...asUser(inviter), json: { email: invitee.email, role, organizationId: orgId } });
  expect(inv.status, inv.text).toBe(200);
  const accepted = await t.http.post('/api/auth/organization/accept-invitation', { ...asUser(invitee), json: { invitationId: inv.body.id } });
  expect(accepted.status, accepted.text).toBe(200);
  return accepted.body.member.id as string;
}
const memberRoles = async (orgId: string) =>
  Object.fromEntries(
    (await rows<{ userId: string; role: string }>(t.db, sql`select "userId", role from member where "organizationId" = ${orgId}`)).map((m) => [m.userId, m.role]),
  );

/** An organization of an owner, an admin (the heir) and a member, and a platform admin to remove accounts. */
async function ownerHeirAndMember() {
  const owner = await verifiedUser('Owner');
  const heir = await verifiedUser('Heir admin');
  const member = await verifiedUser('Member');
  const orgId = await createOrg(owner);
  const heirMember = await join(owner, orgId, heir, 'admin');
  await join(owner, orgId, member, 'member');
  return { owner, heir, member, orgId, heirMember, platformAdmin: await createAdmin(t) };
}

describe('an owner removed by a platform admin hands over the organization', () => {
  it('attack: the heir leaving at the moment of the removal: the next member becomes the owner', async () => {
    const { owner, heir, member, orgId, heirMember, platformAdmin } = await ownerHeirAndMember();

    // Hold the heir's member row so that both requests are in their write before either goes on.
    const held = await holdOpen(locker, (tx) => tx`select 1 from member where id = ${heirMember} for update`);
    const pending: Promise<CallResult>[] = [];
    try {
      const leave = t.http.post('/api/auth/organization/leave', { ...asUser(heir), json: { organizationId: orgId } });
      pending.push(leave);
      await eventually('the leave waits', async () => (await statementsWaitingForLock(t.db, '%delete from "member"%')) >= 1);
      const removal = t.http.post('/api/auth/admin/remove-user', { ...asUser(platformAdmin), json: { userId: owner.userId } });
      pending.push(removal);
      await eventually('the removal waits in its hand-over', async () => (await statementsWaitingForLock(t.db, '%delete from "user"%')) >= 1);
    } finally {
      await held.release();
    }
    const [left, removed] = (await Promise.all(pending)) as [CallResult, CallResult];
    expect(left.status, left.text).toBe(200);
    expect(removed.status, removed.text).toBe(200);
    // The member is still in the organization: it must have an owner (the member, the only one left).
    expect(await memberRoles(orgId)).toEqual({ [member.userId]: 'owner' });
  });

  // The heir's own account removed at the same moment: the hand-over wrote 'owner' on a row the other removal's
  // cascade deleted right after; now that row going hands the organization over in turn.
  it('attack: the owner and the heir removed at once: the remaining member becomes the owner', async () => {
    const { owner, heir, member, orgId, heirMember, platformAdmin } = await ownerHeirAndMember();

    const held = await holdOpen(locker, (tx) => tx`select 1 from member where id = ${heirMember} for update`);
    const pending: Promise<CallResult>[] = [];
    try {
      pending.push(t.http.post('/api/auth/admin/remove-user', { ...asUser(platformAdmin), json: { userId: owner.userId } }));
      await eventually('the owner removal waits in its hand-over', async () => (await statementsWaitingForLock(t.db, '%delete from "user"%')) >= 1);
      pending.push(t.http.post('/api/auth/admin/remove-user', { ...asUser(platformAdmin), json: { userId: heir.userId } }));
      await eventually('the heir removal waits in its cascade', async () => (await statementsWaitingForLock(t.db, '%delete from "user"%')) >= 2);
    } finally {
      await held.release();
    }
    const answers = await Promise.all(pending);
    expect(answers.map((r) => r.status), answers.map((r) => r.text).join(' / ')).toEqual([200, 200]);
    expect(await memberRoles(orgId)).toEqual({ [member.userId]: 'owner' });
  });
});

// Found by review 13: the removal took a member row, then its organization's (the owner rule); a deletion of the
// organization and the hand-over take them the other way round, and PostgreSQL ended one of the two (503). The removal
// now takes its organizations first, in id order (migration 20261127001700).
describe('the removal beside an organization deletion or another removal', () => {
  it('a co-owner deletes the organization while a platform admin removes the other owner: both answer', async () => {
    const owner = await verifiedUser('Owner');
    const coOwner = await verifiedUser('Co-owner');
    const orgId = await createOrg(owner);
    await join(owner, orgId, coOwner, 'owner');
    const platformAdmin = await createAdmin(t);

    const held = await holdOpen(locker, (tx) => tx`select 1 from "organization" where id = ${orgId} for update`);
    const pending: Promise<CallResult>[] = [];
    try {
      pending.push(t.http.post('/api/auth/organization/delete', { ...asUser(coOwner), json: { organizationId: orgId } }));
      await eventually('the delete waits', async () => (await statementsWaitingForLock(t.db, '%delete from "organization"%')) >= 1);
      pending.push(t.http.post('/api/auth/admin/remove-user', { ...asUser(platformAdmin), json: { userId: owner.userId } }));
      await eventually('the removal waits in the owner rule', async () => (await statementsWaitingForLock(t.db, '%delete from "user"%')) >= 1);
    } finally {
      await held.release();
    }
    const [deleted, removed] = (await Promise.all(pending)) as [CallResult, CallResult];
    // the 503 is PostgreSQL's deadlock detector (1 s); sent again, the removal passes and nothing is left behind
    if (removed.status === 503) {
      const again = await t.http.post('/api/auth/admin/remove-user', { ...asUser(platformAdmin), json: { userId: owner.userId } });
      expect(again.status, again.text).toBe(200);
    }
    expect(await memberRoles(orgId)).toEqual({});
    expect([deleted.status, removed.status], `${deleted.text} / ${removed.text}`).toEqual([200, 200]);
  });

  it('two owners removed at once, each the heir of the other\'s organization: both answer, both organizations keep an owner', async () => {
    // O owns X alone with H its admin; H owns Y alone with O its admin. Member rows in the order O@Y < O@X and
    // H@X < H@Y, so each removal's cascade meets its admin row first and its owner row second.
    const o = await verifiedUser('O');
    const h = await verifiedUser('H');
    const z = await verifiedUser('Z');
    const m = await verifiedUser('M');
    const x = await createOrg(z);
    await join(z, x, h, 'admin'); // H@X
    const y = await createOrg(h); // H@Y
    await join(h, y, o, 'admin'); // O@Y
    await join(h, y, m, 'member');
    await join(z, x, o, 'owner'); // O@X
    await join(z, x, m, 'member');
    expect((await t.http.post('/api/auth/organization/leave', { ...asUser(z), json: { organizationId: x } })).status).toBe(200);
    const platformAdmin = await createAdmin(t);

    const held = await holdOpen(locker, (tx) => tx`select 1 from "organization" where id = ${x} for update`);
    const pending: Promise<CallResult>[] = [];
    try {
      pending.push(t.http.post('/api/auth/admin/remove-user', { ...asUser(platformAdmin), json: { userId: o.userId } }));
      await eventually('O\'s removal waits for X', async () => (await statementsWaitingForLock(t.db, '%delete from "user"%')) >= 1);
      pending.push(t.http.post('/api/auth/admin/remove-user', { ...asUser(platformAdmin), json: { userId: h.userId } }));
      await eventually('H\'s removal waits for its heir in Y', async () => (await statementsWaitingForLock(t.db, '%delete from "user"%')) >= 2);
    } finally {
      await held.release();
    }
    const answers = await Promise.all(pending);
    // the 503 is PostgreSQL's deadlock detector (1 s); sent again, the removal passes and both organizations keep an owner
    for (const [i, who] of [o, h].entries()) {
      if (answers[i]!.status !== 503) continue;
      const again = await t.http.post('/api/auth/admin/remove-user', { ...asUser(platformAdmin), json: { userId: who.userId } });
      expect(again.status, again.text).toBe(200);
    }
    expect([await memberRoles(x), await memberRoles(y)]).toEqual([{ [m.userId]: 'owner' }, { [m.userId]: 'owner' }]);
    expect(answers.map((r) => r.status), answers.map((r) => r.text).join(' / ')).toEqual([200, 200]);
  });
});
