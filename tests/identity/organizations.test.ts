import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { INVITATIONS_PER_ADDRESS_PER_HOUR, INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR, INVITATIONS_PER_DAY } from '../../functions/auth/invitation-rules.ts';
import { ORGANIZATIONS_PER_ADDRESS_PER_DAY, ORGANIZATIONS_PER_DAY, OWNED_ORGANIZATIONS } from '../../functions/auth/organization-limits.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { deliverMail, linkIn, mailsTo } from '../support/mail.ts';
import { startSmtpServer, type TestSmtpServer } from '../support/smtp.ts';
import { createAdmin, signIn, signUp, type TestUser } from '../support/users.ts';

/**
 * Organizations through the library's endpoints: create, get full, invite a member, accept. The app runs with
 * SMTP_URL pointing at a real SMTP server, so the invitation mail is seen arriving over SMTP. Every test makes
 * its own users and organizations, so each runs alone (and in any order).
 */
let t: TestApp;
let smtp: TestSmtpServer;
beforeAll(async () => {
  smtp = await startSmtpServer();
  // TRUSTED_PROXIES: a request may say which client address it comes from (X-Forwarded-For, withOrigin below).
  t = await startTestApp({ env: { SMTP_URL: smtp.url, MAIL_FROM: 'Marketplace <no-reply@market.example>', TRUSTED_PROXIES: '127.0.0.1, ::1' } });
});
afterAll(async () => {
  await t.close();
  await smtp.close();
});

/**
 * A browser request of the account whose session `cookie` is: with the Origin a browser sends, from an address of that
 * account's own (X-Forwarded-For, believed from the loopback proxy), as real users are. The file makes more
 * organizations than one address may in a day (ORGANIZATIONS_PER_ADDRESS_PER_DAY, organization-limits.ts).
 */
const addresses = new Map<string, string>();
const withOrigin = (cookie: string) => {
  let address = addresses.get(cookie);
  if (!address) addresses.set(cookie, (address = `198.18.${addresses.size >> 8}.${addresses.size & 255}`));
  return { cookie, headers: { origin: t.baseUrl, 'x-forwarded-for': address } };
};
const unique = () => randomUUID().slice(0, 8);
const address = (what: string) => `${what}-${unique()}@example.test`;

/** A signed-in user whose address is verified (in SQL; the verification link itself is tested in sessions.test.ts). */
const verifiedUser = (name = 'Owner') => signUp(t, { name, verified: true });

async function createOrg(owner: TestUser, name = 'Acme Robotics', slug = `acme-${unique()}`) {
  const res = await t.http.post('/api/auth/organization/create', { ...withOrigin(owner.cookie), json: { name, slug } });
  expect(res.status, res.text).toBe(200);
  return res.body as { id: string; name: string; slug: string };
}

const invite = (inviter: TestUser, organizationId: string, email: string, extra: Record<string, unknown> = {}) =>
  t.http.post('/api/auth/organization/invite-member', {
    ...withOrigin(inviter.cookie),
    json: { email, role: 'member', organizationId, ...extra },
  });

const invitationRows = async (inviterId: string) =>
  (await first<{ n: number }>(t.db, sql`select count(*)::int as n from invitation where "inviterId" = ${inviterId}`))!.n;

describe('organizations', () => {
  it('creates an organization with the creator as owner, and reads it in full', async () => {
    const owner = await verifiedUser();
    const org = await createOrg(owner, 'Acme Robotics');
    expect(org).toMatchObject({ name: 'Acme Robotics' });
    const full = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${org.id}`, { cookie: owner.cookie });
    expect(full.status).toBe(200);
    expect(full.body.members).toEqual([expect.objectContaining({ userId: owner.userId, role: 'owner' })]);
  });

  it('a duplicate slug is refused', async () => {
    const owner = await verifiedUser();
    const org = await createOrg(owner);
    const again = await t.http.post('/api/auth/organization/create', {
      ...withOrigin(owner.cookie),
      json: { name: 'Acme Again', slug: org.slug },
    });
    expect(again.status).toBe(400);
  });

  it('anonymous callers get 401; a non-member cannot read or invite', async () => {
    const owner = await verifiedUser();
    const org = await createOrg(owner, 'Private Co');
    expect((await t.http.post('/api/auth/organization/create', { json: { name: 'X', slug: `x-${unique()}` } })).status).toBe(401);
    expect((await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${org.id}`)).status).toBe(401);
    const stranger = await verifiedUser('Stranger');
    const read = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${org.id}`, { cookie: stranger.cookie });
    expect(read.status).toBe(403);
    const target = address('someone');
    const res = await invite(stranger, org.id, target);
    // The library's answer for a caller who is not a member of the organization.
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('MEMBER_NOT_FOUND');
    expect(await mailsTo(t, target)).toEqual([]);
  });
});

describe('how many organizations an account makes', () => {
  const create = (owner: TestUser, slug = `org-${unique()}`) =>
    t.http.post('/api/auth/organization/create', { ...withOrigin(owner.cookie), json: { name: 'Spam Org', slug } });
  const organizationsOwned = async (userId: string) =>
    (await first<{ n: number }>(t.db, sql`select count(*)::int as n from member where "userId" = ${userId} and role = 'owner'`))!.n;

  it(`attack: creations sent all at once stop at ${ORGANIZATIONS_PER_DAY} a day, deleting one gives none back, the next day brings more`, async () => {
    // The library sets no limit: one account scripted organizations (rows in the shared database) without end.
    const spammer = await verifiedUser();
    const answers = await Promise.all(Array.from({ length: ORGANIZATIONS_PER_DAY + 3 }, () => create(spammer)));
    const made = answers.filter((res) => res.status === 200);
    const refused = answers.filter((res) => res.status !== 200);
    expect(made).toHaveLength(ORGANIZATIONS_PER_DAY);
    for (const res of refused) {
      expect([res.status, res.body.code]).toEqual([429, 'RATE_LIMITED']);
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    }
    expect(await organizationsOwned(spammer.userId)).toBe(ORGANIZATIONS_PER_DAY);

    const deleted = await t.http.post('/api/auth/organization/delete', { ...withOrigin(spammer.cookie), json: { organizationId: made[0]!.body.id } });
    expect(deleted.status, deleted.text).toBe(200);
    expect((await create(spammer)).status).toBe(429);
    expect(await organizationsOwned(spammer.userId)).toBe(ORGANIZATIONS_PER_DAY - 1);

    // Another account is not held back by this one's count.
    expect((await create(await verifiedUser())).status).toBe(200);

    t.clock.advance(24 * 60 * 60 * 1000 + 1000);
    const nextDay = await create(spammer);
    expect(nextDay.status, nextDay.text).toBe(200);
  });

  it(`attack: fresh accounts from one address make at most ${ORGANIZATIONS_PER_ADDRESS_PER_DAY} organizations a day; another address is not held back`, async () => {
    // Accounts cost nothing (sign-up needs no verified address): four throwaway accounts from one address made 40
    // organizations, a new account whenever one's day was used up (review 33).
    const createFrom = (owner: TestUser, ip: string) =>
      t.http.post('/api/auth/organization/create', {
        cookie: owner.cookie,
        headers: { origin: t.baseUrl, 'x-forwarded-for': ip },
        json: { name: 'Spam Org', slug: `org-${unique()}` },
      });
    const statuses: number[] = [];
    for (let a = 0; a < ORGANIZATIONS_PER_ADDRESS_PER_DAY / ORGANIZATIONS_PER_DAY; a++) {
      const account = await signUp(t);
      for (let i = 0; i < ORGANIZATIONS_PER_DAY; i++) statuses.push((await createFrom(account, '203.0.113.50')).status);
    }
    expect(statuses).toEqual(Array(ORGANIZATIONS_PER_ADDRESS_PER_DAY).fill(200));
    const late = await signUp(t);
    const refused = await createFrom(late, '203.0.113.50');
    expect([refused.status, refused.body.code, refused.body.limitPerDay]).toEqual([429, 'RATE_LIMITED', ORGANIZATIONS_PER_ADDRESS_PER_DAY]);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await organizationsOwned(late.userId)).toBe(0);
    // The refusal spent none of the late account's own day: from another address it has all of it.
    for (let i = 0; i < ORGANIZATIONS_PER_DAY; i++) expect((await createFrom(late, '198.51.100.50')).status).toBe(200);
    expect(await organizationsOwned(late.userId)).toBe(ORGANIZATIONS_PER_DAY);
  });

  it(`attack: an account owns at most ${OWNED_ORGANIZATIONS} organizations; memberships by invitation do not count`, async () => {
    const owner = await verifiedUser();
    const member = await verifiedUser();
    // Organizations made over earlier days (written in SQL: the daily count would take weeks through the API)
    for (let i = 0; i < OWNED_ORGANIZATIONS; i++) {
      const orgId = randomUUID();
      await sql`insert into "organization" (id, name, slug, "createdAt") values (${orgId}, 'Old', ${`old-${orgId}`}, now())`.execute(t.db);
      await sql`insert into member (id, "organizationId", "userId", role, "createdAt") values
                  (${randomUUID()}, ${orgId}, ${owner.userId}, 'owner', now()),
                  (${randomUUID()}, ${orgId}, ${member.userId}, 'member', now())`.execute(t.db);
    }
    const refused = await create(owner);
    expect([refused.status, refused.body.code]).toEqual([403, 'YOU_HAVE_REACHED_THE_MAXIMUM_NUMBER_OF_ORGANIZATIONS']);
    expect(await organizationsOwned(owner.userId)).toBe(OWNED_ORGANIZATIONS);
    const own = await create(member);
    expect(own.status, own.text).toBe(200);
  });
});

describe('invitations', () => {
  it('goes out over SMTP with a fixed subject; the names people chose appear only in the body, quoted', async () => {
    // A name of two lines is refused where it is typed now (review 19); one stored before that rule is set here.
    const owner = await verifiedUser('Support Team');
    await sql`update "user" set name = ${'Support Team\nhttps://evil.example/login'} where id = ${owner.userId}`.execute(t.db);
    const org = await createOrg(owner, 'Prize desk: claim your reward at https://evil.example');
    const newcomer = address('newcomer');
    const res = await invite(owner, org.id, newcomer);
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ email: newcomer, role: 'member', status: 'pending' });

    await deliverMail(t);
    const mail = smtp.received.find((m) => m.to.includes(newcomer));
    expect(mail).toBeDefined();
    expect(mail!.from).toBe('no-reply@market.example');
    expect(mail!.subject).toBe('You have been invited to an organization on Agent Marketplace');
    expect(mail!.subject).not.toContain('evil');
    expect(mail!.body).toContain(`${t.baseUrl}/accept-invitation?id=${res.body.id}`);
    expect(mail!.body).toContain('"Prize desk: claim your reward at https://evil.example"');
    // The inviter's name stays on one quoted line (no line break of theirs starts a paragraph of the mail).
    expect(mail!.body).toContain('"Support Team https://evil.example/login"');
    expect((await mailsTo(t, newcomer))[0]!.status).toBe('sent');

    const full = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${org.id}`, { cookie: owner.cookie });
    expect(full.body.invitations).toEqual([expect.objectContaining({ email: newcomer, status: 'pending' })]);
  });

  it('an inviter whose own address is not verified is refused (403) and nothing is sent', async () => {
    // The phishing relay of finding 8: sign up with a throwaway address, never verify, invite strangers.
    const spammer = await signUp(t, { name: 'Unverified' });
    const org = await createOrg(spammer, 'Free gift cards https://evil.example');
    const targets = [address('target'), address('target')];
    for (const target of targets) {
      const res = await invite(spammer, org.id, target);
      expect(res.status).toBe(403);
      expect(res.body.code).toBe('EMAIL_NOT_VERIFIED');
      expect(await mailsTo(t, target)).toEqual([]);
    }
    expect(await invitationRows(spammer.userId)).toBe(0);
  });

  it(`an inviter sends at most ${INVITATIONS_PER_DAY} a day across organizations, resends included (429 with Retry-After), counted in the database`, async () => {
    const owner = await verifiedUser();
    const [orgA, orgB] = [await createOrg(owner, 'Org A'), await createOrg(owner, 'Org B')];
    // Invitations the database already holds count, whoever wrote them: the count is not in process memory.
    for (let i = 0; i < INVITATIONS_PER_DAY - 2; i++) {
      await sql`insert into invitation (id, "organizationId", email, role, status, "expiresAt", "createdAt", "inviterId")
                values (${randomUUID()}, ${orgA.id}, ${address('seeded')}, 'member', 'pending', now() + interval '2 days', now(), ${owner.userId})`.execute(t.db);
    }
    const last = [address('last'), address('last')];
    expect((await invite(owner, orgA.id, last[0]!)).status).toBe(200);
    expect((await invite(owner, orgB.id, last[1]!)).status).toBe(200);

    const over = address('over');
    const refused = await invite(owner, orgB.id, over);
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe('RATE_LIMITED');
    const retryAfter = Number(refused.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(24 * 60 * 60);
    expect(await mailsTo(t, over)).toEqual([]);

    // A resend of a pending invitation is a new invitation: refused as well, and no second mail.
    const before = (await mailsTo(t, last[1]!)).length;
    const resend = await invite(owner, orgB.id, last[1]!, { resend: true });
    expect(resend.status).toBe(429);
    expect(await mailsTo(t, last[1]!)).toHaveLength(before);
    expect(await invitationRows(owner.userId)).toBe(INVITATIONS_PER_DAY);

    // A day later the inviter may invite again.
    const start = t.clock.now();
    try {
      // (From the real time: the library stamps invitations with it, and the test clock started with the app.)
      t.clock.set(new Date(Date.now() + 24 * 60 * 60 * 1000 + 60_000));
      expect((await invite(owner, orgB.id, over)).status).toBe(200);
    } finally {
      t.clock.set(start);
    }
  });

  it(`invitations sent all at once still stop at ${INVITATIONS_PER_DAY} (the count and the claim are one step)`, async () => {
    // The attack: fire the invitations in parallel, so that every count is read before any invitation is written.
    const owner = await verifiedUser();
    const org = await createOrg(owner, 'Burst Co');
    await sql`insert into invitation (id, "organizationId", email, role, status, "expiresAt", "createdAt", "inviterId")
              select gen_random_uuid()::text, ${org.id}, 'seeded-' || g || '@example.test', 'member', 'pending',
                     now() + interval '2 days', now(), ${owner.userId}
                from generate_series(1, ${INVITATIONS_PER_DAY - 5}) g`.execute(t.db);
    const targets = Array.from({ length: 15 }, () => address('burst'));
    const answers = await Promise.all(targets.map((target) => invite(owner, org.id, target)));
    expect(answers.map((a) => a.status).sort()).toEqual([...Array(5).fill(200), ...Array(10).fill(429)]);
    expect(await invitationRows(owner.userId)).toBe(INVITATIONS_PER_DAY);
    const mailed = (await Promise.all(targets.map((target) => mailsTo(t, target)))).filter((m) => m.length > 0);
    expect(mailed).toHaveLength(5);
    // Every claim became its invitation's record: none is left open, counting a second time against the inviter.
    const open = sql<{ n: number }>`select count(*)::int as n from invitation_claims where inviter_id = ${owner.userId} and invitation_id is null`;
    expect((await first<{ n: number }>(t.db, open))!.n).toBe(0);
  });

  it('attack: deleting the organization does not give the inviter a new day of invitations', async () => {
    // The count read the library's invitation rows, which an organization's deletion takes with it: send 20,
    // delete the organization, make another, send 20 more, and so on without end.
    const spammer = await verifiedUser('Click here: https://evil.example/login');
    const sent: string[] = [];
    for (let round = 0; round < 2; round++) {
      const org = await createOrg(spammer, 'Totally Legit Payroll');
      for (let i = 0; i < INVITATIONS_PER_DAY; i++) {
        const target = address(`victim-${round}`);
        const res = await invite(spammer, org.id, target);
        if (res.status !== 200) {
          expect([res.status, res.body.code]).toEqual([429, 'RATE_LIMITED']);
          break;
        }
        sent.push(target);
      }
      const deleted = await t.http.post('/api/auth/organization/delete', { ...withOrigin(spammer.cookie), json: { organizationId: org.id } });
      expect(deleted.status, deleted.text).toBe(200);
    }
    expect(sent).toHaveLength(INVITATIONS_PER_DAY);
    expect(await invitationRows(spammer.userId)).toBe(0); // the library's rows went with the organizations
    const mailed = (await Promise.all(sent.map((target) => mailsTo(t, target)))).filter((m) => m.length > 0);
    expect(mailed).toHaveLength(INVITATIONS_PER_DAY);
  });

  it(`attack: many inviters mail one address ${INVITATIONS_PER_ADDRESS_PER_HOUR} invitations an hour, each at most ${INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR}; the rest are refused, said so`, async () => {
    // Each inviter has 20 a day, but nothing bounded what one address received from many of them (found by a review).
    // (Unconfirmed: its reset link then shares an allowance with its sign-up's verification link, recipient-allowance.ts.)
    const victim = await signUp(t, { name: 'Victim' });
    const answers: number[][] = [];
    for (let i = 0; i < 6; i++) {
      const inviter = await verifiedUser(`Inviter ${i}`);
      const org = await createOrg(inviter);
      const mine: number[] = [];
      for (let j = 0; j < 3; j++) {
        const res = await invite(inviter, org.id, victim.email);
        mine.push(res.status);
        if (res.status === 429) {
          expect(res.body.code).toBe('RATE_LIMITED');
          expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
        }
      }
      answers.push(mine);
      if (i === 5) expect(await invitationRows(inviter.userId)).toBe(0); // a refused invitation is not made
    }
    // two from each inviter, the third refused; the sixth inviter finds the address's hour used up
    expect(answers).toEqual([...Array(5).fill([200, 200, 429]), [429, 429, 429]]);
    const invitations = (await mailsTo(t, victim.email)).filter((m) => /invit/i.test(m.subject));
    expect(invitations).toHaveLength(INVITATIONS_PER_ADDRESS_PER_HOUR);
    // which is not the account mails' allowance: the owner's password reset is mailed
    expect((await t.http.post('/api/auth/request-password-reset', { json: { email: victim.email } })).status).toBe(200);
    expect((await mailsTo(t, victim.email)).filter((m) => /reset/i.test(m.subject))).toHaveLength(1);
  });

  it("attack: one account re-inviting an address to its own organization cannot use up the address's hour", async () => {
    // Found by the review of the first version, which counted the address alone: ten re-invitations from a junk
    // organization, and a real organization's invitation in that hour went unmailed with the same 200.
    const newcomer = address('newcomer'); // no account yet: the mail is the only way they learn of it
    const attacker = await verifiedUser('Attacker');
    const junk = await createOrg(attacker, 'Junk');
    const tries = [];
    for (let i = 0; i < INVITATIONS_PER_ADDRESS_PER_HOUR; i++) tries.push((await invite(attacker, junk.id, newcomer)).status);
    expect(tries).toEqual([200, 200, ...Array(INVITATIONS_PER_ADDRESS_PER_HOUR - 2).fill(429)]);
    const employer = await verifiedUser('Employer');
    const acme = await createOrg(employer, 'Acme Robotics');
    expect((await invite(employer, acme.id, newcomer)).status).toBe(200);
    const mails = await mailsTo(t, newcomer);
    expect(mails.filter((m) => m.text.includes('Junk'))).toHaveLength(2);
    expect(mails.filter((m) => m.text.includes('Acme Robotics'))).toHaveLength(1);
  });

  it('attack: the other spellings of one mailbox (`name+tag@`) are one address to both invitation allowances (review 33)', async () => {
    // They were new addresses to the counts, and one inbox at Gmail, Outlook, iCloud, Fastmail and Proton.
    const name = `newcomer-${unique()}`;
    const spelling = (tag: string) => `${name}+${tag}@example.test`;
    const attacker = await verifiedUser('Attacker');
    const junk = await createOrg(attacker, 'Junk');
    const fromOne = [];
    for (let i = 0; i < INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR + 1; i++) fromOne.push((await invite(attacker, junk.id, spelling(`a${i}`))).status);
    expect(fromOne).toEqual([...Array(INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR).fill(200), 429]);
    const fromMany = [];
    for (let i = 1; i * INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR <= INVITATIONS_PER_ADDRESS_PER_HOUR; i++) {
      const inviter = await verifiedUser(`Inviter ${i}`);
      const org = await createOrg(inviter);
      for (let j = 0; j < INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR; j++) fromMany.push((await invite(inviter, org.id, spelling(`b${i}-${j}`))).status);
    }
    // the attacker's two and the others' fill the mailbox's hour; the last ones are refused, said so
    const granted = INVITATIONS_PER_ADDRESS_PER_HOUR - INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR;
    expect(fromMany).toEqual([...Array(granted).fill(200), ...Array(fromMany.length - granted).fill(429)]);
    const mailed = await rows<{ n: number }>(t.db, sql`select count(*)::int as n from mail_outbox where to_address like ${`${name}+%`}`);
    expect(mailed).toEqual([{ n: INVITATIONS_PER_ADDRESS_PER_HOUR }]);
  });

  it('attack: an admin cannot make an owner by spelling the role with a space, nor use such a role stored before the rule', async () => {
    // The plugin's owner check split "admin, owner" without trimming (no "owner": allowed), its later checks trimmed
    // (an owner), so an admin's accomplice could invite a real owner, who removed the original one.
    const owner = await verifiedUser();
    const org = await createOrg(owner, 'Victim Co');
    const admin = await verifiedUser('Admin');
    const asAdmin = await invite(owner, org.id, admin.email, { role: 'admin' });
    expect(asAdmin.status, asAdmin.text).toBe(200);
    expect((await t.http.post('/api/auth/organization/accept-invitation', { ...withOrigin(admin.cookie), json: { invitationId: asAdmin.body.id } })).status).toBe(200);
    for (const role of ['admin, owner', ['admin', ' owner'], 'owner ', 'member,member', '']) {
      const target = address('accomplice');
      const res = await invite(admin, org.id, target, { role });
      expect([JSON.stringify(role), res.status]).toEqual([JSON.stringify(role), 400]);
      expect(await mailsTo(t, target)).toEqual([]);
    }
    expect((await invite(admin, org.id, address('accomplice'), { role: 'owner' })).status).toBe(403); // the library's own rule
    expect(await invitationRows(admin.userId)).toBe(0);
    // a role change spelled so is refused too
    const adminMember = (await first<{ id: string }>(t.db, sql`select id from member where "userId" = ${admin.userId}`))!;
    const change = await t.http.post('/api/auth/organization/update-member-role', {
      ...withOrigin(owner.cookie),
      json: { memberId: adminMember.id, role: 'admin,admin', organizationId: org.id },
    });
    expect(change.status).toBe(400);

    // An invitation such a role was stored with before the rule cannot be accepted.
    const invitee = await verifiedUser('Accomplice');
    const stored = randomUUID();
    await sql`insert into invitation (id, "organizationId", email, role, status, "expiresAt", "createdAt", "inviterId")
              values (${stored}, ${org.id}, ${invitee.email}, 'admin, owner', 'pending', now() + interval '2 days', now(), ${admin.userId})`.execute(t.db);
    const accepted = await t.http.post('/api/auth/organization/accept-invitation', { ...withOrigin(invitee.cookie), json: { invitationId: stored } });
    expect(accepted.status).toBe(400);
    const roles = await first<{ roles: string[] }>(t.db, sql`select array_agg(role order by role) as roles from member where "organizationId" = ${org.id}`);
    expect(roles!.roles).toEqual(['admin', 'owner']);
  });

  it('a resend replaces the pending invitation with a new one (counted), and the old link dies', async () => {
    const owner = await verifiedUser();
    const org = await createOrg(owner, 'Resend Co');
    const invitee = address('invitee');
    const first_ = await invite(owner, org.id, invitee);
    expect(first_.status).toBe(200);
    const again = await invite(owner, org.id, invitee, { resend: true });
    expect(again.status, again.text).toBe(200);
    expect(again.body.id).not.toBe(first_.body.id);
    expect(await invitationRows(owner.userId)).toBe(2);
    const full = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${org.id}`, { cookie: owner.cookie });
    const statuses = Object.fromEntries(full.body.invitations.map((i: { id: string; status: string }) => [i.id, i.status]));
    expect(statuses).toEqual({ [first_.body.id]: 'canceled', [again.body.id]: 'pending' });
  });

  it("attack: accounts that may not invite (unverified, a plain member, an admin asking for an owner) use up nothing of an address's hour", async () => {
    // Review 17: the address's allowance was taken before the inviter was checked, so five free unverified accounts,
    // each refused 403 twice, used up the address's hour, and a real organization's invitation to it was refused 429.
    const newcomer = address('newcomer');
    for (let i = 0; i < INVITATIONS_PER_ADDRESS_PER_HOUR / INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR; i++) {
      const junk = await signUp(t, { name: `Junk ${i}` }); // never verified: sign-up needs no mailbox
      const org = await createOrg(junk, 'Junk');
      for (let j = 0; j < INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR; j++) {
        const res = await invite(junk, org.id, newcomer);
        expect([res.status, res.body.code]).toEqual([403, 'EMAIL_NOT_VERIFIED']);
      }
    }
    // Nor does a member whose role may not invite, nor an admin inviting an owner (the plugin's refusals).
    const owner = await verifiedUser('Junk owner');
    const org = await createOrg(owner, 'Junk');
    const [member, admin] = [await verifiedUser('Member'), await verifiedUser('Admin')];
    await join(owner, org.id, member, 'member');
    await join(owner, org.id, admin, 'admin');
    for (let j = 0; j < INVITATIONS_PER_ADDRESS_PER_HOUR; j++) {
      expect((await invite(member, org.id, newcomer)).status).toBe(403);
      expect((await invite(admin, org.id, newcomer, { role: 'owner' })).status).toBe(403);
    }
    expect(await mailsTo(t, newcomer)).toEqual([]);
    // A real organization's invitation to that address goes, and its mail arrives.
    const employer = await verifiedUser('Employer');
    const acme = await createOrg(employer, 'Acme Robotics');
    const res = await invite(employer, acme.id, newcomer);
    expect(res.status, res.text).toBe(200);
    // Its mail is the address's only one, queued to go (delivery over SMTP: "goes out over SMTP" above; delivering
    // here would also send the many mails the file's earlier tests left queued, about 8 s a tier).
    expect((await mailsTo(t, newcomer)).map((m) => [m.status, m.text])).toEqual([['pending', expect.stringContaining(res.body.id)]]);
  });

  it('a refused re-invitation or resend cancels nothing: the invitation mailed before stays pending and its link admits the invitee', async () => {
    // Review 17: the plugin cancels the pending invitation a re-invite replaces before it asks our rules, so a refused
    // re-invite (429, or 403) killed the invitee's link while the inviter was told nothing was done.
    const owner = await verifiedUser();
    const org = await createOrg(owner, 'Steady Co');
    const invitee = await verifiedUser('Invitee');
    expect((await invite(owner, org.id, invitee.email)).status).toBe(200);
    const second = await invite(owner, org.id, invitee.email); // a re-invite: replaces the first (2 an hour from one inviter)
    expect(second.status).toBe(200);
    const pending = () => rows<{ id: string }>(t.db, sql`select id from invitation where email = ${invitee.email} and status = 'pending'`);
    expect((await pending()).map((r) => r.id)).toEqual([second.body.id]);
    const refused = [await invite(owner, org.id, invitee.email), await invite(owner, org.id, invitee.email, { resend: true })];
    expect(refused.map((r) => [r.status, r.body.code])).toEqual([[429, 'RATE_LIMITED'], [429, 'RATE_LIMITED']]);
    // refused 403 too: an inviter whose address is no longer verified (an admin changed it, say)
    await sql`update "user" set "emailVerified" = false where id = ${owner.userId}`.execute(t.db);
    const unverified = await invite(owner, org.id, invitee.email, { resend: true });
    expect([unverified.status, unverified.body.code]).toEqual([403, 'EMAIL_NOT_VERIFIED']);
    expect((await pending()).map((r) => r.id)).toEqual([second.body.id]);
    const accepted = await t.http.post('/api/auth/organization/accept-invitation', { ...withOrigin(invitee.cookie), json: { invitationId: second.body.id } });
    expect(accepted.status, accepted.text).toBe(200);
  });

  it('a call the plugin refuses after our checks (someone already a member) gives back what it took', async () => {
    const owner = await verifiedUser();
    const org = await createOrg(owner, 'Giveback Co');
    const member = await verifiedUser('Member');
    await join(owner, org.id, member, 'member'); // one of the owner's two invitations an hour to this address
    for (let i = 0; i < INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR + 1; i++) {
      const res = await invite(owner, org.id, member.email);
      expect([res.status, res.body.code]).toEqual([400, 'USER_IS_ALREADY_A_MEMBER_OF_THIS_ORGANIZATION']);
    }
    // no claim left open against the owner's day, and the address's allowance is as it was: one more invitation goes
    const open = sql<{ n: number }>`select count(*)::int as n from invitation_claims where inviter_id = ${owner.userId} and invitation_id is null`;
    expect((await first<{ n: number }>(t.db, open))!.n).toBe(0);
    const removed = await t.http.post('/api/auth/organization/remove-member', { ...withOrigin(owner.cookie), json: { memberIdOrEmail: member.email, organizationId: org.id } });
    expect(removed.status, removed.text).toBe(200);
    expect((await invite(owner, org.id, member.email)).status).toBe(200);
  });

  it('accepting needs a verified email: an unverified account with the invitee\'s address gets 403, the verified owner joins', async () => {
    const owner = await verifiedUser();
    const org = await createOrg(owner, 'Join Co');
    const joinerEmail = address('joiner');
    const inv = await invite(owner, org.id, joinerEmail);
    expect(inv.status).toBe(200);
    // Anyone can sign up with any address; until its owner follows the verification link, it accepts nothing.
    const joiner = await signUp(t, { email: joinerEmail });
    const accept = () =>
      t.http.post('/api/auth/organization/accept-invitation', { ...withOrigin(joiner.cookie), json: { invitationId: inv.body.id } });
    const unverified = await accept();
    expect(unverified.status).toBe(403);
    expect((await t.http.get(`/api/auth/organization/get-invitation?id=${inv.body.id}`, { cookie: joiner.cookie })).status).toBe(403);

    const verification = (await mailsTo(t, joinerEmail)).find((m) => m.subject === 'Confirm your Agent Marketplace email address')!;
    const link = linkIn(verification);
    // (followed in the joiner's own signed-in browser: a signed-out click verifies nothing, sessions.test.ts)
    expect((await t.http.get(link.pathname + link.search, { cookie: joiner.cookie })).status).toBe(302);
    const accepted = await accept();
    expect(accepted.status, accepted.text).toBe(200);
    const full = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${org.id}`, { cookie: joiner.cookie });
    expect(full.status).toBe(200);
    expect(full.body.members.map((m: { userId: string }) => m.userId).sort()).toEqual([owner.userId, joiner.userId].sort());
    expect((await signIn(t, joiner)).userId).toBe(joiner.userId);
  });
});

/** `invitee` joins `org` as `role` through an invitation from `inviter`. */
async function join(inviter: TestUser, orgId: string, invitee: TestUser, role: string) {
  const inv = await invite(inviter, orgId, invitee.email, { role });
  expect(inv.status, inv.text).toBe(200);
  const accepted = await t.http.post('/api/auth/organization/accept-invitation', { ...withOrigin(invitee.cookie), json: { invitationId: inv.body.id } });
  expect(accepted.status, accepted.text).toBe(200);
  return accepted.body.member as { id: string };
}

const memberRoles = async (orgId: string) =>
  Object.fromEntries(
    (await rows<{ userId: string; role: string }>(t.db, sql`select "userId", role from member where "organizationId" = ${orgId}`)).map((m) => [m.userId, m.role]),
  );

describe('every organization keeps an owner (races: organization-owners.pg-only.test.ts)', () => {
  it('of two owners one may leave; the other, now the only owner, may not (400, the plugin\'s code)', async () => {
    const a = await verifiedUser('Owner A');
    const b = await verifiedUser('Owner B');
    const org = await createOrg(a);
    await join(a, org.id, b, 'owner');
    const left = await t.http.post('/api/auth/organization/leave', { ...withOrigin(a.cookie), json: { organizationId: org.id } });
    expect(left.status, left.text).toBe(200);
    const refused = await t.http.post('/api/auth/organization/leave', { ...withOrigin(b.cookie), json: { organizationId: org.id } });
    expect([refused.status, refused.body.code]).toEqual([400, 'YOU_CANNOT_LEAVE_THE_ORGANIZATION_AS_THE_ONLY_OWNER']);
    expect(await memberRoles(org.id)).toEqual({ [b.userId]: 'owner' });
  });

  it('the database refuses whatever writer takes the only owner away, counting a role list ("owner,admin") as an owner', async () => {
    // The rule holds for every writer of the member table, not only the plugin's endpoints (one at a time here; at
    // once in the pg-only file, where the plugin's own count is passed by both).
    const a = await verifiedUser('Owner A');
    const b = await verifiedUser('Owner B');
    const org = await createOrg(a);
    const bMember = await join(a, org.id, b, 'admin,owner');
    const aMember = (await first<{ id: string }>(t.db, sql`select id from member where "userId" = ${a.userId} and "organizationId" = ${org.id}`))!;
    await sql`delete from member where id = ${aMember.id}`.execute(t.db); // b is an owner still: allowed
    for (const write of [
      sql`delete from member where id = ${bMember.id}`,
      sql`update member set role = 'admin' where id = ${bMember.id}`,
      sql`update member set "organizationId" = ${(await createOrg(b)).id} where id = ${bMember.id}`,
    ]) {
      await expect(write.execute(t.db)).rejects.toMatchObject({ code: '23514' });
    }
    await sql`update member set role = 'owner' where id = ${bMember.id}`.execute(t.db); // stays an owner: allowed
    expect(await memberRoles(org.id)).toEqual({ [b.userId]: 'owner' });
  });

  it('an organization is still deleted with its members, and an account removed by a platform admin hands over what it owned alone', async () => {
    // The decision (migrations 20261127000800, 20261127001000): an account's removal is erasure and is never held back
    // by what it owns; an organization it owned alone goes to its longest-standing admin (else member), and one with
    // nobody else in it goes with the account (it had stayed without an owner for good).
    const owner = await verifiedUser();
    const admin = await verifiedUser('Admin');
    const doomed = await createOrg(owner, 'Doomed Co');
    await join(owner, doomed.id, admin, 'admin');
    const deleted = await t.http.post('/api/auth/organization/delete', { ...withOrigin(owner.cookie), json: { organizationId: doomed.id } });
    expect(deleted.status, deleted.text).toBe(200);
    expect(await memberRoles(doomed.id)).toEqual({});

    const kept = await createOrg(owner, 'Kept Co');
    const member = await verifiedUser('Member');
    await join(owner, kept.id, member, 'member'); // joined first, but an admin comes before a member
    await join(owner, kept.id, admin, 'admin');
    const alone = await createOrg(owner, 'Solo Co');
    const shared = await createOrg(owner, 'Shared Co');
    const coOwner = await verifiedUser('Co-owner');
    const sharedAdmin = await verifiedUser('Shared admin');
    await join(owner, shared.id, coOwner, 'owner');
    await join(owner, shared.id, sharedAdmin, 'admin');
    const platformAdmin = await createAdmin(t);
    const removed = await t.http.post('/api/auth/admin/remove-user', { ...withOrigin(platformAdmin.cookie), json: { userId: owner.userId } });
    expect(removed.status, removed.text).toBe(200);
    expect(await memberRoles(kept.id)).toEqual({ [admin.userId]: 'owner', [member.userId]: 'member' });
    expect(await memberRoles(shared.id)).toEqual({ [coOwner.userId]: 'owner', [sharedAdmin.userId]: 'admin' });
    expect(await rows(t.db, sql`select id from "organization" where id = ${alone.id}`)).toEqual([]);
    // the heir acts as the owner: invites, and may delete the organization
    const invited = await invite(admin, kept.id, `next-${unique()}@example.test`, { role: 'admin' });
    expect(invited.status, invited.text).toBe(200);
    const gone = await t.http.post('/api/auth/organization/delete', { ...withOrigin(admin.cookie), json: { organizationId: kept.id } });
    expect(gone.status, gone.text).toBe(200);
  });

  // Was (review 10): the banned admin became the owner over the standing member, an owner who cannot sign in (the
  // organization stuck again), and a banned co-owner stopped the hand-over altogether.
  it('attack: the hand-over skips banned members while a standing one is there; a banned co-owner does not stop it', async () => {
    const owner = await verifiedUser();
    const rogue = await verifiedUser('Banned admin');
    const member = await verifiedUser('Member');
    const coOwner = await verifiedUser('Banned co-owner');
    const org = await createOrg(owner, 'Handed Co');
    await join(owner, org.id, rogue, 'admin');
    await join(owner, org.id, member, 'member');
    const second = await createOrg(owner, 'Co-owned Co');
    await join(owner, second.id, coOwner, 'owner');
    await join(owner, second.id, member, 'member');
    const lonely = await createOrg(owner, 'Only banned left');
    await join(owner, lonely.id, rogue, 'admin');
    const platformAdmin = await createAdmin(t);
    for (const banned of [rogue, coOwner]) {
      const res = await t.http.post(`/admin/users/${banned.userId}/ban`, { ...withOrigin(platformAdmin.cookie), json: { reason: 'abuse' } });
      expect(res.status, res.text).toBe(200);
    }
    const removed = await t.http.post('/api/auth/admin/remove-user', { ...withOrigin(platformAdmin.cookie), json: { userId: owner.userId } });
    expect(removed.status, removed.text).toBe(200);
    expect(await memberRoles(org.id)).toEqual({ [rogue.userId]: 'admin', [member.userId]: 'owner' });
    expect(await memberRoles(second.id)).toEqual({ [coOwner.userId]: 'owner', [member.userId]: 'owner' });
    // nobody standing left: the banned admin keeps it (a ban may be lifted; an organization keeps an owner)
    expect(await memberRoles(lonely.id)).toEqual({ [rogue.userId]: 'owner' });
  });
});

describe('an invitation stands only while its inviter is a member and not banned', () => {
  /** An organization whose admin (a rogue) left an invitation of theirs pending, to a second account of theirs, as admin. */
  async function orgWithRogueAdmin() {
    const owner = await verifiedUser();
    const rogue = await verifiedUser('Rogue admin');
    const org = await createOrg(owner, 'Acme');
    await join(owner, org.id, rogue, 'admin');
    const sock = await verifiedUser('Second account');
    const pending = await invite(rogue, org.id, sock.email, { role: 'admin' });
    expect(pending.status, pending.text).toBe(200);
    return { owner, rogue, sock, org, invitationId: pending.body.id as string };
  }
  const accept = (u: TestUser, invitationId: string) =>
    t.http.post('/api/auth/organization/accept-invitation', { ...withOrigin(u.cookie), json: { invitationId } });
  const statusOf = async (invitationId: string) => (await first<{ status: string }>(t.db, sql`select status from invitation where id = ${invitationId}`))!.status;

  it('control: an invitation from a current admin is accepted', async () => {
    const { sock, org, invitationId } = await orgWithRogueAdmin();
    const accepted = await accept(sock, invitationId);
    expect(accepted.status, accepted.text).toBe(200);
    expect((await memberRoles(org.id))[sock.userId]).toBe('admin');
  });

  // Was: get-invitation said the inviter was gone, accept-invitation answered 200 and the second account was admin.
  it("attack: a removed admin's pending invitation no longer admits anyone; it is canceled with the membership", async () => {
    const { owner, rogue, sock, org, invitationId } = await orgWithRogueAdmin();
    const removed = await t.http.post('/api/auth/organization/remove-member', { ...withOrigin(owner.cookie), json: { memberIdOrEmail: rogue.email, organizationId: org.id } });
    expect(removed.status, removed.text).toBe(200);
    expect(await statusOf(invitationId)).toBe('canceled');
    expect((await t.http.get(`/api/auth/organization/get-invitation?id=${invitationId}`, { cookie: sock.cookie })).status).toBe(400);
    const accepted = await accept(sock, invitationId);
    expect(accepted.status, accepted.text).toBe(400);
    expect(await memberRoles(org.id)).toEqual({ [owner.userId]: 'owner' });
  });

  it('attack: an admin who leaves takes their pending invitations with them (their invitations elsewhere stay)', async () => {
    const { owner, rogue, sock, org, invitationId } = await orgWithRogueAdmin();
    const elsewhere = await createOrg(rogue, 'Rogue Co');
    const other = await invite(rogue, elsewhere.id, address('friend'));
    expect(other.status, other.text).toBe(200);
    expect((await t.http.post('/api/auth/organization/leave', { ...withOrigin(rogue.cookie), json: { organizationId: org.id } })).status).toBe(200);
    expect(await statusOf(invitationId)).toBe('canceled');
    expect(await statusOf(other.body.id)).toBe('pending');
    expect((await accept(sock, invitationId)).status).toBe(400);
    expect(await memberRoles(org.id)).toEqual({ [owner.userId]: 'owner' });
  });

  // Was (review 10): the owner demoted the rogue instead of removing them, and the rogue's second account still joined
  // as admin, with rights the rogue no longer had.
  it("attack: an admin demoted to member has their pending invitations canceled, and one stored since is refused", async () => {
    const { owner, rogue, sock, org, invitationId } = await orgWithRogueAdmin();
    const rogueMember = (await first<{ id: string }>(t.db, sql`select id from member where "organizationId" = ${org.id} and "userId" = ${rogue.userId}`))!.id;
    const demoted = await t.http.post('/api/auth/organization/update-member-role', {
      ...withOrigin(owner.cookie),
      json: { memberId: rogueMember, role: 'member', organizationId: org.id },
    });
    expect(demoted.status, demoted.text).toBe(200);
    expect(await statusOf(invitationId)).toBe('canceled');
    expect((await accept(sock, invitationId)).status).toBe(400);
    // an invitation of the demoted member's written afterwards (as one stored before this rule): refused at accept
    const id = randomUUID();
    await sql`insert into invitation (id, "organizationId", email, role, status, "expiresAt", "createdAt", "inviterId")
              values (${id}, ${org.id}, ${sock.email}, 'member', 'pending', now() + interval '2 days', now(), ${rogue.userId})`.execute(t.db);
    const stored = await accept(sock, id);
    expect([stored.status, stored.body.code]).toEqual([400, 'INVITER_IS_NO_LONGER_A_MEMBER_OF_THE_ORGANIZATION']);
    expect(await memberRoles(org.id)).toEqual({ [owner.userId]: 'owner', [rogue.userId]: 'member' });
  });

  it("an owner demoted to admin keeps their admin invitations and loses their owner ones; an admin's owner invitation never stands", async () => {
    const owner = await verifiedUser();
    const second = await verifiedUser('Second owner');
    const org = await createOrg(owner, 'Two owners');
    await join(owner, org.id, second, 'owner');
    const asAdmin = await invite(second, org.id, address('admin-to-be'), { role: 'admin' });
    const asOwner = await invite(second, org.id, address('owner-to-be'), { role: 'owner' });
    expect([asAdmin.status, asOwner.status]).toEqual([200, 200]);
    const secondMember = (await first<{ id: string }>(t.db, sql`select id from member where "organizationId" = ${org.id} and "userId" = ${second.userId}`))!.id;
    const demoted = await t.http.post('/api/auth/organization/update-member-role', {
      ...withOrigin(owner.cookie),
      json: { memberId: secondMember, role: 'admin', organizationId: org.id },
    });
    expect(demoted.status, demoted.text).toBe(200);
    expect([await statusOf(asAdmin.body.id), await statusOf(asOwner.body.id)]).toEqual(['pending', 'canceled']);
  });

  // Was: 200, the banned admin's second account was admin.
  it("attack: a banned admin's pending invitation no longer admits anyone; the ban cancels it", async () => {
    const { owner, rogue, sock, org, invitationId } = await orgWithRogueAdmin();
    const platformAdmin = await createAdmin(t);
    const banned = await t.http.post(`/admin/users/${rogue.userId}/ban`, { ...withOrigin(platformAdmin.cookie), json: { reason: 'abuse' } });
    expect(banned.status, banned.text).toBe(200);
    expect(await statusOf(invitationId)).toBe('canceled');
    expect((await accept(sock, invitationId)).status).toBe(400);
    expect(await memberRoles(org.id)).toEqual({ [owner.userId]: 'owner', [rogue.userId]: 'admin' });
  });

  it('an invitation still pending from an inviter who is gone or banned (stored before the rule) is refused as get-invitation refuses it', async () => {
    const { owner, rogue, sock, org } = await orgWithRogueAdmin();
    const stored = async (inviterId: string) => {
      const id = randomUUID();
      await sql`insert into invitation (id, "organizationId", email, role, status, "expiresAt", "createdAt", "inviterId")
                values (${id}, ${org.id}, ${sock.email}, 'admin', 'pending', now() + interval '2 days', now(), ${inviterId})`.execute(t.db);
      return id;
    };
    // banned (and the ban's own cancellation done): a pending invitation of theirs written afterwards
    await sql`update "user" set banned = true where id = ${rogue.userId}`.execute(t.db);
    const fromBanned = await accept(sock, await stored(rogue.userId));
    expect([fromBanned.status, fromBanned.body.code]).toEqual([400, 'INVITER_IS_NO_LONGER_A_MEMBER_OF_THE_ORGANIZATION']);
    // gone: never a member of the organization
    const stranger = await verifiedUser('Stranger');
    const fromStranger = await accept(sock, await stored(stranger.userId));
    expect([fromStranger.status, fromStranger.body.code]).toEqual([400, 'INVITER_IS_NO_LONGER_A_MEMBER_OF_THE_ORGANIZATION']);
    expect(await memberRoles(org.id)).toEqual({ [owner.userId]: 'owner', [rogue.userId]: 'admin' });
    // and a ban that has ended stands again
    await sql`update "user" set "banExpires" = now() - interval '1 minute' where id = ${rogue.userId}`.execute(t.db);
    const afterBan = await accept(sock, await stored(rogue.userId));
    expect(afterBan.status, afterBan.text).toBe(200);
  });
});

describe('one account, one membership per organization (races: organization-race.pg-only.test.ts)', () => {
  // Review 24: an account holding two pending invitations to one organization (sent at once, or one sent while it was
  // joining) accepted both and held two member rows; remove-member and update-member-role act on one row, so the
  // member the owner removed stayed one, and a demoted admin kept the role, through the other.
  const accept = (u: TestUser, invitationId: string) =>
    t.http.post('/api/auth/organization/accept-invitation', { ...withOrigin(u.cookie), json: { invitationId } });
  const statusOf = async (invitationId: string) => (await first<{ status: string }>(t.db, sql`select status from invitation where id = ${invitationId}`))!.status;
  const storedInvitation = async (orgId: string, email: string, inviterId: string, role = 'admin') => {
    const id = randomUUID();
    await sql`insert into invitation (id, "organizationId", email, role, status, "expiresAt", "createdAt", "inviterId")
              values (${id}, ${orgId}, ${email}, ${role}, 'pending', now() + interval '2 days', now(), ${inviterId})`.execute(t.db);
    return id;
  };

  it('attack: a member accepting a second invitation (as a race with their joining leaves one) is refused 400, and their removal sticks', async () => {
    const owner = await verifiedUser();
    const org = await createOrg(owner, 'Once Co');
    const alt = await verifiedUser('Second account');
    await join(owner, org.id, alt, 'admin');
    const second = await storedInvitation(org.id, alt.email, owner.userId);
    const again = await accept(alt, second);
    expect([again.status, again.body.code]).toEqual([400, 'USER_IS_ALREADY_A_MEMBER_OF_THIS_ORGANIZATION']);
    expect(await statusOf(second)).toBe('pending'); // not used up by the refused acceptance
    expect(await memberRoles(org.id)).toEqual({ [owner.userId]: 'owner', [alt.userId]: 'admin' });

    const removed = await t.http.post('/api/auth/organization/remove-member', { ...withOrigin(owner.cookie), json: { memberIdOrEmail: alt.email, organizationId: org.id } });
    expect(removed.status, removed.text).toBe(200);
    expect(await memberRoles(org.id)).toEqual({ [owner.userId]: 'owner' });
    expect((await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${org.id}`, { cookie: alt.cookie })).status).toBe(403);
    // whoever writes a membership: the database holds one per account (unique index member_one_per_account)
    const ownerTwice = sql`insert into member (id, "organizationId", "userId", role, "createdAt") values (${randomUUID()}, ${org.id}, ${owner.userId}, 'member', now())`;
    await expect(ownerTwice.execute(t.db)).rejects.toMatchObject({ code: '23505' });
  });

  it('a pending invitation written for an address replaces the pending one it had, whoever writes it', async () => {
    const owner = await verifiedUser();
    const org = await createOrg(owner, 'Replace Co');
    const invitee = address('invitee');
    const mailed = await invite(owner, org.id, invitee);
    expect(mailed.status, mailed.text).toBe(200);
    const stored = await storedInvitation(org.id, invitee.toUpperCase(), owner.userId, 'member'); // (any case of the address)
    expect([await statusOf(mailed.body.id), await statusOf(stored)]).toEqual(['canceled', 'pending']);
    const elsewhere = await createOrg(owner, 'Other Co'); // another organization's invitation to it stands beside it
    expect((await invite(owner, elsewhere.id, invitee)).status).toBe(200);
    expect(await statusOf(stored)).toBe('pending');
  });
});
