import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * Organization requests raced on PostgreSQL (the embedded database serves one statement at a time):
 *   * the same organization created twice at once: the library checks the slug, then inserts, so the second insert of
 *     a race failed on organization_slug_key and the library answered 500 (found by a review's probe). Sent one after
 *     the other, the second answers 400 ORGANIZATION_ALREADY_EXISTS; at once, the contract's 409 CONFLICT;
 *   * one account's memberships of an organization (review 24, finding 3): two invitations of one address sent at once
 *     both stayed pending, the account accepted both and held two member rows, and the owner's remove-member (or
 *     update-member-role) acted on one of them only. The interleavings are forced by a connection of the test's own
 *     holding the organization's row, which every invitation and membership insert waits for (its foreign key).
 */

let t: TestApp;
let user: TestUser;
let locker: postgres.Sql;
beforeAll(async () => {
  t = await startTestApp();
  user = await signUp(t, { verified: true });
  locker = postgres(t.databaseUrl!, { max: 1, onnotice: () => {} });
});
afterAll(async () => {
  await locker?.end({ timeout: 1 });
  await t?.close();
});

describe('organization/create raced on one slug', () => {
  it('answers 200 once and 4xx to the rest, never 500', async () => {
    const answers = await Promise.all(
      Array.from({ length: 10 }, () =>
        t.http.post('/api/auth/organization/create', {
          cookie: user.cookie,
          headers: { origin: t.baseUrl },
          json: { name: 'Race org', slug: 'race-org' },
        }),
      ),
    );
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    expect(statuses.filter((s) => s !== 200 && s !== 400 && s !== 409), JSON.stringify(answers.map((a) => a.text.slice(0, 120)))).toEqual([]);
    // in the library's shape, as every answer under /api/auth, and listed (review 101: it was the envelope, unlisted)
    for (const a of answers.filter((x) => x.status === 409)) expect(a.body.code).toBe('CONFLICT');
    const create = (await t.http.get('/openapi.json')).body.paths['/api/auth/organization/create'].post;
    expect(Object.keys(create.responses)).toContain('409');
    expect(t.logs.filter((l) => l.level === 'error')).toEqual([]);
  });
});

describe('one account, one membership per organization (review 24)', () => {
  const withOrigin = (u: TestUser) => ({ cookie: u.cookie, headers: { origin: t.baseUrl } });
  const invite = (inviter: TestUser, organizationId: string, email: string, role: string) =>
    t.http.post('/api/auth/organization/invite-member', { ...withOrigin(inviter), json: { email, role, organizationId } });
  const accept = (invitee: TestUser, invitationId: string) =>
    t.http.post('/api/auth/organization/accept-invitation', { ...withOrigin(invitee), json: { invitationId } });
  const pendingTo = async (organizationId: string, email: string) =>
    (await rows<{ id: string }>(t.db, sql`select id from invitation where "organizationId" = ${organizationId} and email = ${email} and status = 'pending'`)).map((r) => r.id);
  const rolesOf = async (organizationId: string, userId: string) =>
    (await rows<{ role: string }>(t.db, sql`select role from member where "organizationId" = ${organizationId} and "userId" = ${userId}`)).map((r) => r.role);
  /** Runs `requests` while the organization's row is held, until `waiting` statements wait for it; then lets them go. */
  async function whileTheOrganizationIsHeld<T>(organizationId: string, waiting: { pattern: string; count: number }[], requests: () => Promise<T>): Promise<T> {
    const held = await holdOpen(locker, (tx) => tx`select 1 from organization where id = ${organizationId} for update`);
    const sent = requests();
    try {
      for (const { pattern, count } of waiting) {
        await eventually(`${count} statement(s) like ${pattern} wait`, async () => (await statementsWaitingForLock(t.db, pattern)) >= count);
      }
    } finally {
      await held.release();
    }
    return sent;
  }

  /** An organization with an owner and an admin, and the admin's second account (verified). */
  async function orgWithAdminAndSecondAccount() {
    const owner = await signUp(t, { verified: true, name: 'Owner' });
    const admin = await signUp(t, { verified: true, name: 'Admin' });
    const alt = await signUp(t, { verified: true, name: 'Second account' });
    const org = await t.http.post('/api/auth/organization/create', { ...withOrigin(owner), json: { name: 'Acme', slug: `acme-${randomUUID().slice(0, 8)}` } });
    expect(org.status, org.text).toBe(200);
    const asAdmin = await invite(owner, org.body.id, admin.email, 'admin');
    expect((await accept(admin, asAdmin.body.id)).status).toBe(200);
    return { owner, admin, alt, orgId: org.body.id as string };
  }

  it('attack: two invitations of one address sent at once leave one pending; the account joins once, and its removal sticks', async () => {
    const { owner, admin, alt, orgId } = await orgWithAdminAndSecondAccount();
    // Both invitations are looked for before either is written (both inserts wait for the organization's row).
    const both = await whileTheOrganizationIsHeld(orgId, [{ pattern: '%insert into "invitation"%', count: 2 }], () =>
      Promise.all([invite(admin, orgId, alt.email, 'admin'), invite(admin, orgId, alt.email, 'admin')]),
    );
    expect(both.map((r) => r.status)).toEqual([200, 200]); // the later replaced the earlier, as a re-invite does
    const pending = await pendingTo(orgId, alt.email);
    const accepted = [];
    for (const id of pending) accepted.push((await accept(alt, id)).status);
    expect({ pending: pending.length, accepted, roles: await rolesOf(orgId, alt.userId) }).toEqual({ pending: 1, accepted: [200], roles: ['admin'] });

    const removed = await t.http.post('/api/auth/organization/remove-member', { ...withOrigin(owner), json: { memberIdOrEmail: alt.email, organizationId: orgId } });
    expect(removed.status, removed.text).toBe(200);
    const read = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${orgId}`, { cookie: alt.cookie });
    expect({ read: read.status, roles: await rolesOf(orgId, alt.userId) }).toEqual({ read: 403, roles: [] });
    expect((await invite(alt, orgId, `x-${randomUUID().slice(0, 8)}@example.test`, 'member')).status).toBe(400); // MEMBER_NOT_FOUND
  });

  it('attack: an invitation sent while the account is joining cannot be accepted too (400, left pending); a demotion sticks', async () => {
    const { owner, admin, alt, orgId } = await orgWithAdminAndSecondAccount();
    const first = await invite(admin, orgId, alt.email, 'admin');
    expect(first.status, first.text).toBe(200);
    // The acceptance waiting at its membership's insert (past its reads: not yet a member), then a second invitation
    // waiting at its own insert. In that order: sent at once, the invitation's trigger could cancel the first
    // invitation before the acceptance marked it, and the acceptance then waited on that row, never reaching its insert
    // (the test timed out under CI's load; one run in many).
    const held = await holdOpen(locker, (tx) => tx`select 1 from organization where id = ${orgId} for update`);
    let joining: ReturnType<typeof accept> | undefined;
    let inviting: ReturnType<typeof invite> | undefined;
    try {
      joining = accept(alt, first.body.id);
      await eventually('the acceptance waits at its insert', async () => (await statementsWaitingForLock(t.db, '%insert into "member"%')) >= 1);
      inviting = invite(admin, orgId, alt.email, 'admin');
      await eventually('the invitation waits at its insert', async () => (await statementsWaitingForLock(t.db, '%insert into "invitation"%')) >= 1);
    } finally {
      await held.release();
    }
    const [joined, second] = await Promise.all([joining, inviting!]);
    expect([joined.status, second.status]).toEqual([200, 200]);
    expect(await pendingTo(orgId, alt.email)).toEqual([second.body.id]);

    const again = await accept(alt, second.body.id);
    expect([again.status, again.body.code]).toEqual([400, 'USER_IS_ALREADY_A_MEMBER_OF_THIS_ORGANIZATION']);
    expect(await pendingTo(orgId, alt.email)).toEqual([second.body.id]); // not used up by the refused acceptance
    expect(await rolesOf(orgId, alt.userId)).toEqual(['admin']);

    const demoted = await t.http.post('/api/auth/organization/update-member-role', {
      ...withOrigin(owner),
      json: { memberId: joined.body.member.id, role: 'member', organizationId: orgId },
    });
    expect(demoted.status, demoted.text).toBe(200);
    expect(await rolesOf(orgId, alt.userId)).toEqual(['member']);
    expect((await invite(alt, orgId, `x-${randomUUID().slice(0, 8)}@example.test`, 'member')).status).toBe(403);
    expect(t.logs.filter((l) => l.level === 'error')).toEqual([]);
  });

  it('invitations of one address sent all at once: the ones its allowance admits are made, one stays pending', async () => {
    const { admin, alt, orgId } = await orgWithAdminAndSecondAccount();
    const answers = await Promise.all(Array.from({ length: 4 }, () => invite(admin, orgId, alt.email, 'member')));
    expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 429, 429]); // twice an hour from one inviter
    expect(await pendingTo(orgId, alt.email)).toHaveLength(1);
  });
});

describe('the organization deleted while a request on it runs (review 82)', () => {
  const withOrigin = (u: TestUser) => ({ cookie: u.cookie, headers: { origin: t.baseUrl } });

  /** Holds the organization's row as its delete does, until `insertLike` waits for it; then deletes it and commits. */
  async function deletedWhile<T>(organizationId: string, insertLike: string, request: () => Promise<T>): Promise<T> {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => (locked = r));
    const deleter = locker.begin(async (tx) => {
      await tx`select 1 from organization where id = ${organizationId} for update`;
      locked();
      await released;
      await tx`delete from organization where id = ${organizationId}`;
    });
    await isLocked;
    const pending = request();
    await eventually(`${insertLike} waits for the organization row`, async () => (await statementsWaitingForLock(t.db, insertLike)) >= 1);
    release();
    await deleter;
    return pending;
  }

  it('accept-invitation and invite-member answer 400 ORGANIZATION_NOT_FOUND, not 500, and log no error', async () => {
    const owner = await signUp(t, { verified: true });
    const invitee = await signUp(t, { verified: true });
    const made = async (name: string) => {
      const org = await t.http.post('/api/auth/organization/create', { ...withOrigin(owner), json: { name, slug: `gone-${randomUUID().slice(0, 8)}` } });
      expect(org.status, org.text).toBe(200);
      return org.body.id as string;
    };
    const first = await made('Going away');
    const inv = await t.http.post('/api/auth/organization/invite-member', { ...withOrigin(owner), json: { email: invitee.email, role: 'member', organizationId: first } });
    expect(inv.status, inv.text).toBe(200);
    const before = t.logs.length;
    const accepted = await deletedWhile(first, '%insert into "member"%', () =>
      t.http.post('/api/auth/organization/accept-invitation', { ...withOrigin(invitee), json: { invitationId: inv.body.id } }),
    );
    expect([accepted.status, accepted.body.code]).toEqual([400, 'ORGANIZATION_NOT_FOUND']);

    const second = await made('Going away too');
    const invited = await deletedWhile(second, '%insert into "invitation"%', () =>
      t.http.post('/api/auth/organization/invite-member', { ...withOrigin(owner), json: { email: `x-${randomUUID()}@example.test`, role: 'member', organizationId: second } }),
    );
    expect([invited.status, invited.body.code]).toEqual([400, 'ORGANIZATION_NOT_FOUND']);
    expect(t.logs.slice(before).filter((l) => l.level === 'error').map((l) => l.message)).toEqual([]);
  });
});
