import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { deliverMail, mailsTo } from '../support/mail.ts';
import { startSmtpServer, type TestSmtpServer } from '../support/smtp.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * Organizations through the library's endpoints: create, get full, invite a member. The app runs with
 * SMTP_URL pointing at a real SMTP server, so the invitation mail is seen arriving over SMTP.
 */
let t: TestApp;
let smtp: TestSmtpServer;
let owner: TestUser;
beforeAll(async () => {
  smtp = await startSmtpServer();
  t = await startTestApp({ env: { SMTP_URL: smtp.url, MAIL_FROM: 'Marketplace <no-reply@market.example>' } });
  owner = await signUp(t, { name: 'Owner' });
  await deliverMail(t); // the owner's verification mail, so the SMTP server below sees only the invitations
});
afterAll(async () => {
  await t.close();
  await smtp.close();
});

const withOrigin = (cookie: string) => ({ cookie, headers: { origin: t.baseUrl } });

describe('organizations', () => {
  it('creates an organization with the creator as owner, and reads it in full', async () => {
    const created = await t.http.post('/api/auth/organization/create', {
      ...withOrigin(owner.cookie),
      json: { name: 'Acme Robotics', slug: 'acme-robotics' },
    });
    expect(created.status, created.text).toBe(200);
    expect(created.body).toMatchObject({ name: 'Acme Robotics', slug: 'acme-robotics' });
    const full = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${created.body.id}`, { cookie: owner.cookie });
    expect(full.status).toBe(200);
    expect(full.body.members).toEqual([expect.objectContaining({ userId: owner.userId, role: 'owner' })]);
  });

  it('a duplicate slug is refused', async () => {
    const again = await t.http.post('/api/auth/organization/create', {
      ...withOrigin(owner.cookie),
      json: { name: 'Acme Again', slug: 'acme-robotics' },
    });
    expect(again.status).toBe(400);
  });

  it('invites a member: the invitation mail goes out over SMTP with the acceptance link', async () => {
    const org = await t.http.post('/api/auth/organization/create', {
      ...withOrigin(owner.cookie),
      json: { name: 'Invite Co', slug: 'invite-co' },
    });
    const invite = await t.http.post('/api/auth/organization/invite-member', {
      ...withOrigin(owner.cookie),
      json: { email: 'newcomer@example.test', role: 'member', organizationId: org.body.id },
    });
    expect(invite.status, invite.text).toBe(200);
    expect(invite.body).toMatchObject({ email: 'newcomer@example.test', role: 'member', status: 'pending' });

    const before = smtp.received.length;
    await deliverMail(t);
    const [mail] = (await smtp.waitFor(before + 1)).slice(before);
    expect(mail!.to).toEqual(['newcomer@example.test']);
    expect(mail!.from).toBe('no-reply@market.example');
    expect(mail!.subject).toContain('Invite Co');
    expect(mail!.body).toContain(`${t.baseUrl}/accept-invitation?id=${invite.body.id}`);
    expect((await mailsTo(t, 'newcomer@example.test'))[0]!.status).toBe('sent');

    const full = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${org.body.id}`, { cookie: owner.cookie });
    expect(full.body.invitations).toEqual([expect.objectContaining({ email: 'newcomer@example.test', status: 'pending' })]);
  });

  it('an invited user can accept once their email is verified, and becomes a member', async () => {
    const org = await t.http.post('/api/auth/organization/create', { ...withOrigin(owner.cookie), json: { name: 'Join Co', slug: 'join-co' } });
    const invite = await t.http.post('/api/auth/organization/invite-member', {
      ...withOrigin(owner.cookie),
      json: { email: 'joiner@example.test', role: 'member', organizationId: org.body.id },
    });
    const joiner = await signUp(t, { email: 'joiner@example.test' });
    // Anyone can sign up with any address (no verification mail yet), so an unverified address cannot accept.
    const unverified = await t.http.post('/api/auth/organization/accept-invitation', {
      ...withOrigin(joiner.cookie),
      json: { invitationId: invite.body.id },
    });
    expect(unverified.status).toBe(403);
    await sql`update "user" set "emailVerified" = true where id = ${joiner.userId}`.execute(t.db);
    const accept = await t.http.post('/api/auth/organization/accept-invitation', {
      ...withOrigin(joiner.cookie),
      json: { invitationId: invite.body.id },
    });
    expect(accept.status, accept.text).toBe(200);
    const full = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${org.body.id}`, { cookie: joiner.cookie });
    expect(full.status).toBe(200);
    expect(full.body.members.map((m: { userId: string }) => m.userId).sort()).toEqual([owner.userId, joiner.userId].sort());
  });

  it('anonymous callers get 401; a non-member cannot read or invite', async () => {
    const org = await t.http.post('/api/auth/organization/create', { ...withOrigin(owner.cookie), json: { name: 'Private Co', slug: 'private-co' } });
    expect((await t.http.post('/api/auth/organization/create', { json: { name: 'X', slug: 'x-co' } })).status).toBe(401);
    expect((await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${org.body.id}`)).status).toBe(401);
    const stranger = await signUp(t);
    const read = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${org.body.id}`, { cookie: stranger.cookie });
    expect(read.status).toBe(403);
    const invite = await t.http.post('/api/auth/organization/invite-member', {
      ...withOrigin(stranger.cookie),
      json: { email: 'someone@example.test', role: 'member', organizationId: org.body.id },
    });
    // The library's answer for a caller who is not a member of the organization.
    expect(invite.status).toBe(400);
    expect(invite.body.code).toBe('MEMBER_NOT_FOUND');
    expect(await mailsTo(t, 'someone@example.test')).toEqual([]);
  });
});
