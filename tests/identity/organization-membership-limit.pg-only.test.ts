import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { MAX_MEMBERS } from '../../functions/auth/library-input.ts';

/**
 * Review 92. docs/identity.md (Organizations): "an organization has at most 100 members, the plugin's membershipLimit",
 * and get-full-organization's membersLimit is capped at 100 on that ground (library-input.ts MAX_MEMBERS). The
 * plugin's accept-invitation counts the members, then (after our beforeAcceptInvitation hook's query) inserts one, with
 * nothing holding the count: invitations accepted at once by different invitees all pass the count.
 */
let t: TestApp;
let owner: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  owner = await signUp(t, { verified: true, name: 'Owner' });
});
afterAll(() => t?.close());

const withOrigin = (u: TestUser) => ({ cookie: u.cookie, headers: { origin: t.baseUrl } });
const memberCount = async (organizationId: string) =>
  (await first<{ n: number }>(t.db, sql`select count(*)::int as n from member where "organizationId" = ${organizationId}`))!.n;

async function fillOrganization(organizationId: string, members: number) {
  for (let i = 0; i < members; i++) {
    const id = randomUUID();
    await sql`insert into "user" (id, name, email, "emailVerified", role, banned, "createdAt", "updatedAt")
              values (${id}, 'Filler', ${`filler-${id}@example.test`}, true, 'user', false, now(), now())`.execute(t.db);
    await sql`insert into member (id, "organizationId", "userId", role, "createdAt") values (${randomUUID()}, ${organizationId}, ${id}, 'member', now())`.execute(t.db);
  }
}

async function invitationFor(organizationId: string, email: string): Promise<string> {
  const id = randomUUID();
  await sql`insert into invitation (id, "organizationId", email, role, status, "expiresAt", "createdAt", "inviterId")
            values (${id}, ${organizationId}, ${email}, 'member', 'pending', now() + interval '2 days', now(), ${owner.userId})`.execute(t.db);
  return id;
}

describe('an organization of 99 members (membershipLimit 100, review 92)', () => {
  it('invitations accepted at once never make it more than 100 members', async () => {
    const created = await t.http.post('/api/auth/organization/create', { ...withOrigin(owner), json: { name: 'Nearly full', slug: `full-${randomUUID().slice(0, 8)}` } });
    expect(created.status, created.text).toBe(200);
    const organizationId = created.body.id as string;
    await fillOrganization(organizationId, 98); // the owner + 98 = 99
    expect(await memberCount(organizationId)).toBe(99);

    const invitees = await Promise.all(Array.from({ length: 4 }, () => signUp(t, { verified: true })));
    const invitations = await Promise.all(invitees.map((u) => invitationFor(organizationId, u.email)));
    const answers = await Promise.all(
      invitees.map((u, i) =>
        t.http.post('/api/auth/organization/accept-invitation', { ...withOrigin(u), json: { invitationId: invitations[i] } }),
      ),
    );
    const statuses = answers.map((a) => a.status);
    // One joins (the 100th member); the others are refused 403 ORGANIZATION_MEMBERSHIP_LIMIT_REACHED.
    // And what the owner reads: get-full-organization lists at most 100 (membersLimit is capped at 100 on the promise
    // that no organization has more), so a member past 100 is in the organization but in no listing of it.
    const full = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${organizationId}`, { cookie: owner.cookie });
    const listed = (full.body.members as Array<{ userId: string }>).map((m) => m.userId);
    const members = await memberCount(organizationId);
    expect({ statuses: statuses.sort(), members, membersMissingFromTheListing: members - listed.length }).toEqual({
      statuses: [200, 403, 403, 403],
      members: MAX_MEMBERS,
      membersMissingFromTheListing: 0,
    });
    expect(answers.filter((a) => a.status === 403).map((a) => a.body.code)).toEqual(Array(3).fill('ORGANIZATION_MEMBERSHIP_LIMIT_REACHED'));
    // The refused invitations are pending again (the plugin puts them back when the member's insert fails).
    const pending = await first<{ n: number }>(t.db, sql`select count(*)::int as n from invitation where "organizationId" = ${organizationId} and status = 'pending'`);
    expect(pending!.n).toBe(3);
  });
});
