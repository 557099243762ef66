import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * An organization has at most 100 pending invitations (the plugin's invitationLimit, its default): its invite-member
 * counts them and then inserts, with nothing holding the count, so invitations sent at once into an organization of 98
 * pending all passed it. list-invitations answers at most 100 rows (pending first, invitation-order.ts), so a pending
 * invitation past 100 was live (its link could be accepted) and in no listing its owner could cancel it from.
 */
let t: TestApp;
let owner: TestUser;
let earlierInviter: TestUser; // who sent the invitations already pending (the per-inviter daily limit counts rows)
beforeAll(async () => {
  t = await startTestApp();
  owner = await signUp(t, { verified: true, name: 'Owner' });
  earlierInviter = await signUp(t, { verified: true, name: 'Earlier inviter' });
});
afterAll(() => t?.close());

const withOrigin = (u: TestUser) => ({ cookie: u.cookie, headers: { origin: t.baseUrl } });
const pendingCount = async (organizationId: string) =>
  (await first<{ n: number }>(t.db, sql`select count(*)::int as n from invitation where "organizationId" = ${organizationId} and status = 'pending'`))!.n;

describe('an organization with 98 pending invitations (invitationLimit 100)', () => {
  it('invitations sent at once never make it more than 100 pending, and every pending one is listed', async () => {
    const created = await t.http.post('/api/auth/organization/create', { ...withOrigin(owner), json: { name: 'Many invited', slug: `inv-${randomUUID().slice(0, 8)}` } });
    expect(created.status, created.text).toBe(200);
    const organizationId = created.body.id as string;
    for (let i = 0; i < 98; i++) {
      await sql`insert into invitation (id, "organizationId", email, role, status, "expiresAt", "createdAt", "inviterId")
                values (${randomUUID()}, ${organizationId}, ${`invited-${i}-${randomUUID()}@example.test`}, 'member', 'pending',
                        now() + interval '2 days', now(), ${earlierInviter.userId})`.execute(t.db);
    }
    // Five admins of the organization, each sending one (an inviter's own invitations take turns on its daily claim).
    const inviters = [owner, ...(await Promise.all(Array.from({ length: 4 }, () => signUp(t, { verified: true }))))];
    for (const admin of inviters.slice(1)) {
      await sql`insert into member (id, "organizationId", "userId", role, "createdAt")
                values (${randomUUID()}, ${organizationId}, ${admin.userId}, 'admin', now())`.execute(t.db);
    }
    const answers = await Promise.all(
      inviters.map((inviter, i) =>
        t.http.post('/api/auth/organization/invite-member', {
          ...withOrigin(inviter),
          json: { organizationId, email: `late-${i}-${randomUUID()}@example.test`, role: 'member' },
        }),
      ),
    );
    const listed = await t.http.get(`/api/auth/organization/list-invitations?organizationId=${organizationId}`, { cookie: owner.cookie });
    expect(listed.status, listed.text).toBe(200);
    const listedPending = (listed.body as Array<{ status: string }>).filter((i) => i.status === 'pending').length;
    const pending = await pendingCount(organizationId);
    expect({ statuses: answers.map((a) => a.status).sort(), pending, pendingMissingFromTheListing: pending - listedPending }).toEqual({
      statuses: [200, 200, 403, 403, 403],
      pending: 100,
      pendingMissingFromTheListing: 0,
    });
    expect(answers.filter((a) => a.status === 403).map((a) => a.body.code)).toEqual(Array(3).fill('INVITATION_LIMIT_REACHED'));
    // A refused invitation uses none of its inviter's day: no claim is left open for the three refused.
    const openClaims = await first<{ n: number }>(
      t.db,
      sql`select count(*)::int as n from public.invitation_claims where inviter_id in (${sql.join(inviters.map((u) => u.userId))}) and invitation_id is null`,
    );
    expect(openClaims!.n).toBe(0);
  });

  it('a re-invite of an address already pending in a full organization replaces its invitation (the limit counts it once)', async () => {
    const created = await t.http.post('/api/auth/organization/create', { ...withOrigin(owner), json: { name: 'Full of invitations', slug: `inv-${randomUUID().slice(0, 8)}` } });
    expect(created.status, created.text).toBe(200);
    const organizationId = created.body.id as string;
    const again = `again-${randomUUID()}@example.test`;
    for (let i = 0; i < 99; i++) {
      await sql`insert into invitation (id, "organizationId", email, role, status, "expiresAt", "createdAt", "inviterId")
                values (${randomUUID()}, ${organizationId}, ${`invited-${i}-${randomUUID()}@example.test`}, 'member', 'pending',
                        now() + interval '2 days', now(), ${earlierInviter.userId})`.execute(t.db);
    }
    const firstInvite = await t.http.post('/api/auth/organization/invite-member', { ...withOrigin(owner), json: { organizationId, email: again, role: 'member' } });
    expect(firstInvite.status, firstInvite.text).toBe(200);
    const reInvite = await t.http.post('/api/auth/organization/invite-member', { ...withOrigin(owner), json: { organizationId, email: again, role: 'member' } });
    expect(reInvite.status, reInvite.text).toBe(200);
    expect(await pendingCount(organizationId)).toBe(100);
  });
});
