import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import { createAdmin, signIn, signUp, type TestUser } from '../support/users.ts';

/**
 * "Unverified email is never proof of ownership" (contract.md, Trust boundaries), whoever writes the address. The auth
 * library's POST /api/auth/admin/update-user (platform admins) wrote a new `email` and left `emailVerified` as it was:
 * an account verified for its old address was then "verified" for an address nobody proved, so a user who talked
 * support into "fixing" their address to someone else's (or an admin's typo) got that person's organization
 * invitations (and their anonymous purchases: tests/billing/admin-changed-address.test.ts). Found by a review. An
 * admin cannot change an address at all now (review 22: with their own mailbox written there, a reset link signed
 * them in as the user), and the database's rule stays for an address written any other way (SQL by an operator):
 * the account is unverified again (a trigger on the user row), and an admin cannot mark an address verified.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

const withOrigin = (cookie: string) => ({ cookie, headers: { origin: t.baseUrl } });
const unique = () => randomUUID().slice(0, 8);
/** An address written by some path other than the API (an operator's SQL): no route changes one (review 22). */
const changeAddress = (userId: string, email: string) => t.db.executeQuery(sql`update "user" set email = ${email} where id = ${userId}`.compile(t.db));

describe("an admin cannot change a user's address (review 22: admins never act as users)", () => {
  it("attack: an admin writes their own mailbox as a user's address, to have the reset link and sign in as the user", async () => {
    const user = await signUp(t, { verified: true });
    const adminMailbox = `admin-inbox-${unique()}@example.test`;
    const change = await t.http.post('/api/auth/admin/update-user', {
      ...withOrigin(admin.cookie),
      json: { userId: user.userId, data: { email: adminMailbox } },
    });
    expect([change.status, change.body.code]).toEqual([403, 'FORBIDDEN']);
    const row = await first<{ email: string; verified: boolean }>(t.db, sql`select email, "emailVerified" as verified from "user" where id = ${user.userId}`);
    expect(row).toEqual({ email: user.email, verified: true });
    expect((await t.http.post('/api/auth/request-password-reset', { json: { email: adminMailbox } })).status).toBe(200);
    expect(await mailsTo(t, adminMailbox)).toEqual([]);
  });
});

describe('an address changed by an admin is not verified until its owner proves it', () => {
  it("attack: a verified account whose address an admin changes to a stranger's accepts the stranger's invitation", async () => {
    const owner = await signUp(t, { name: 'Owner', verified: true });
    const org = await t.http.post('/api/auth/organization/create', { ...withOrigin(owner.cookie), json: { name: 'Acme', slug: `acme-${unique()}` } });
    expect(org.status, org.text).toBe(200);
    const strangerAddress = `stranger-${unique()}@example.test`;
    const invitation = await t.http.post('/api/auth/organization/invite-member', {
      ...withOrigin(owner.cookie),
      json: { email: strangerAddress, role: 'admin', organizationId: org.body.id },
    });
    expect(invitation.status, invitation.text).toBe(200);

    // The attacker verified their OWN address, then has it changed to the stranger's (by an operator's SQL: an
    // admin's update-user refuses it, below).
    const attacker = await signUp(t, { name: 'Attacker', verified: true });
    await changeAddress(attacker.userId, strangerAddress);

    // Nobody has opened a link sent to strangerAddress: the account must not count as its verified owner.
    const session = await t.http.get('/api/auth/get-session', { cookie: attacker.cookie });
    expect(session.body.user.email).toBe(strangerAddress);
    expect(session.body.user.emailVerified).toBe(false);

    const accept = await t.http.post('/api/auth/organization/accept-invitation', {
      ...withOrigin(attacker.cookie),
      json: { invitationId: invitation.body.id },
    });
    expect(accept.status, accept.text).toBe(403);
    const member = await first(t.db, sql`select 1 from member where "organizationId" = ${org.body.id} and "userId" = ${attacker.userId}`);
    expect(member).toBeUndefined();
  });

  it('the same account signing in again with its password is not verified for the new address either', async () => {
    const user = await signUp(t, { verified: true });
    const newAddress = `new-${unique()}@example.test`;
    await changeAddress(user.userId, newAddress);
    const again = await signIn(t, { email: newAddress, password: user.password });
    const session = await t.http.get('/api/auth/get-session', { cookie: again.cookie });
    expect(session.body.user.emailVerified).toBe(false);
  });
  it("a reset link mailed to the old address ends with the change (a reset verifies: it would prove the new address)", async () => {
    // Found by the review of the change: the link from the old mailbox still reset the password afterwards, and a
    // reset marks the account verified, for the new address nobody opened a link for.
    const user = await signUp(t, { verified: true });
    expect((await t.http.post('/api/auth/request-password-reset', { json: { email: user.email } })).status).toBe(200);
    const mail = (await mailsTo(t, user.email)).find((m) => /reset/i.test(m.subject))!;
    const token = linkIn(mail).pathname.split('/').pop()!;
    const newAddress = `changed-${unique()}@example.test`;
    await changeAddress(user.userId, newAddress);
    const reset = await t.http.post('/api/auth/reset-password', { json: { newPassword: 'brand new password 1', token } });
    expect([reset.status, reset.body.code]).toEqual([400, 'INVALID_TOKEN']);
    const again = await signIn(t, { email: newAddress, password: user.password });
    expect((await t.http.get('/api/auth/get-session', { cookie: again.cookie })).body.user.emailVerified).toBe(false);
  });

  it('an admin cannot mark an address verified, on an account made or changed (400); taking it back is allowed', async () => {
    const user = await signUp(t);
    const vouch = await t.http.post('/api/auth/admin/update-user', {
      ...withOrigin(admin.cookie),
      json: { userId: user.userId, data: { emailVerified: true } },
    });
    expect([vouch.status, vouch.body.code]).toEqual([400, 'VALIDATION_ERROR']);
    expect(vouch.text).toContain('only the owner of an address can verify it');
    const made = await t.http.post('/api/auth/admin/create-user', {
      ...withOrigin(admin.cookie),
      json: { email: `made-${unique()}@example.test`, name: 'Made', password: 'a long enough password', data: { emailVerified: true } },
    });
    expect([made.status, made.body.code]).toEqual([400, 'VALIDATION_ERROR']);
    const row = await first<{ verified: boolean }>(t.db, sql`select "emailVerified" as verified from "user" where id = ${user.userId}`);
    expect(row!.verified).toBe(false);

    const verified = await signUp(t, { verified: true });
    const takeBack = await t.http.post('/api/auth/admin/update-user', {
      ...withOrigin(admin.cookie),
      json: { userId: verified.userId, data: { emailVerified: false } },
    });
    expect(takeBack.status, takeBack.text).toBe(200);
    expect((await t.http.get('/api/auth/get-session', { cookie: verified.cookie })).body.user.emailVerified).toBe(false);
  });

  it("an admin's change of the name alone leaves the address verified", async () => {
    const user = await signUp(t, { verified: true });
    const change = await t.http.post('/api/auth/admin/update-user', {
      ...withOrigin(admin.cookie),
      json: { userId: user.userId, data: { name: 'New Name' } },
    });
    expect(change.status, change.text).toBe(200);
    const session = await t.http.get('/api/auth/get-session', { cookie: user.cookie });
    expect([session.body.user.name, session.body.user.emailVerified]).toEqual(['New Name', true]);
  });
});
