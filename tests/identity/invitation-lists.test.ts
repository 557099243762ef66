import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * The auth library reads every list with a limit of 100 rows and no order, and an organization's invitations
 * (list-invitations, get-full-organization) and an address's (list-user-invitations) in every status: once an
 * organization had sent more than 100 over its life (a re-invite or a resend makes a new row and leaves the old one
 * canceled), or an address had declined 100, the pending invitation sent next was missing from what the owner or the
 * invitee read (found by review 48). Now the library's reads of invitations take the pending ones first
 * (functions/auth/invitation-order.ts). The history is written straight into the table: a hundred invitations sent
 * and ended over HTTP take the allowances of days.
 */
let t: TestApp;
let owner: TestUser;
let orgId: string;
beforeAll(async () => {
  t = await startTestApp();
  owner = await signUp(t, { verified: true, name: 'Owner' });
  const org = await t.http.post('/api/auth/organization/create', { ...withOrigin(owner), json: { name: 'Busy Org', slug: `busy-${randomUUID().slice(0, 8)}` } });
  expect(org.status, org.text).toBe(200);
  orgId = org.body.id;
});
afterAll(() => t?.close());

const withOrigin = (u: TestUser) => ({ cookie: u.cookie, headers: { origin: t.baseUrl } });

async function invite(email: string) {
  const res = await t.http.post('/api/auth/organization/invite-member', { ...withOrigin(owner), json: { email, role: 'member', organizationId: orgId } });
  expect(res.status, res.text).toBe(200);
  return res.body as { id: string };
}

/** `count` invitations of the organization that ended long ago (canceled, rejected or accepted), to `email` or to many. */
async function history(count: number, status: 'canceled' | 'rejected' | 'accepted', email?: string) {
  for (let i = 0; i < count; i++) {
    const to = email ?? `old-guest-${i}-${randomUUID().slice(0, 6)}@example.test`;
    await sql`insert into invitation (id, "organizationId", email, role, status, "expiresAt", "createdAt", "inviterId")
              values (${randomUUID()}, ${orgId}, ${to}, 'member', ${status}, now() - interval '30 days', now() - interval '32 days', ${owner.userId})`.execute(t.db);
  }
}

describe('an organization that has sent more than 100 invitations', () => {
  it('lists every pending invitation, the newest one too (list-invitations and get-full-organization)', async () => {
    await history(70, 'canceled');
    await history(40, 'accepted');
    const pending = [await invite(`guest-a-${randomUUID().slice(0, 6)}@example.test`), await invite(`guest-b-${randomUUID().slice(0, 6)}@example.test`)];

    const listed = await t.http.get(`/api/auth/organization/list-invitations?organizationId=${orgId}`, { cookie: owner.cookie });
    expect(listed.status).toBe(200);
    const full = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${orgId}`, { cookie: owner.cookie });
    expect(full.status).toBe(200);
    const pendingOf = (list: Array<{ id: string; status: string }>) => list.filter((i) => i.status === 'pending').map((i) => i.id).sort();
    const want = pending.map((p) => p.id).sort();
    expect({ listed: pendingOf(listed.body), full: pendingOf(full.body.invitations) }).toEqual({ listed: want, full: want });
  });
});

describe('an address that has declined more than 100 invitations', () => {
  it('list-user-invitations shows the pending invitation it got last', async () => {
    const invitee = await signUp(t, { verified: true, name: 'Popular' });
    await history(110, 'rejected', invitee.email);
    const latest = await invite(invitee.email);
    const mine = await t.http.get('/api/auth/organization/list-user-invitations', { cookie: invitee.cookie });
    expect(mine.status).toBe(200);
    expect((mine.body as Array<{ id: string }>).map((i) => i.id)).toEqual([latest.id]);
  });
});
