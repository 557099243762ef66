import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertAgent, insertTier } from '../support/fixtures.ts';
import { mailsTo } from '../support/mail.ts';
import { createAdmin, signUp, verifyEmail, type TestUser } from '../support/users.ts';
import { createAgent, expectError, walk } from './helpers.ts';
import {
  DEMO_REQUESTS_PER_ADDRESS_PER_DAY,
  DEMO_REQUESTS_PER_DAY,
  ENTERPRISE_INQUIRIES_PER_ADDRESS_PER_DAY,
  ENTERPRISE_INQUIRIES_PER_DAY,
} from '../../functions/catalog/engagement-requests.ts';
import { accessTokenFor } from '../support/oauth.ts';

let t: TestApp;
let admin: TestUser;
let user: TestUser;

beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  user = await signUp(t, { name: 'Dana Buyer' });
});
afterAll(() => t.close());

const UNKNOWN = '6f1d3f8e-5b0e-4c1a-9f51-9a0a3c1f2b7d';

describe('notification recipients', () => {
  it('adds, lists, edits and removes recipients (admin only)', async () => {
    const add = await t.http.post('/admin/notification-recipients', { cookie: admin.cookie, json: { email: 'Sales@Example.test', name: 'Sales' } });
    expect(add.status).toBe(201);
    expect(add.body.data).toMatchObject({ email: 'sales@example.test', name: 'Sales' });
    const id = add.body.data.id;
    expectError(await t.http.post('/admin/notification-recipients', { cookie: admin.cookie, json: { email: 'sales@example.test' } }), 409, 'CONFLICT');
    expectError(await t.http.post('/admin/notification-recipients', { cookie: admin.cookie, json: { email: 'nope' } }), 400, 'VALIDATION_ERROR');

    const edited = await t.http.patch(`/admin/notification-recipients/${id}`, { cookie: admin.cookie, json: { name: null, email: 'deals@example.test' } });
    expect(edited.status).toBe(200);
    expect(edited.body.data).toMatchObject({ id, email: 'deals@example.test', name: null });
    const list = await t.http.get('/admin/notification-recipients', { cookie: admin.cookie });
    expect(list.body.data.map((r: any) => r.email)).toContain('deals@example.test');

    const other = await t.http.post('/admin/notification-recipients', { cookie: admin.cookie, json: { email: 'ops@example.test' } });
    expectError(
      await t.http.patch(`/admin/notification-recipients/${other.body.data.id}`, { cookie: admin.cookie, json: { email: 'DEALS@example.test' } }),
      409,
      'CONFLICT',
    );
    expectError(await t.http.patch(`/admin/notification-recipients/${UNKNOWN}`, { cookie: admin.cookie, json: { name: 'x' } }), 404, 'NOT_FOUND');
    expect((await t.http.delete(`/admin/notification-recipients/${other.body.data.id}`, { cookie: admin.cookie })).body.data).toEqual({
      id: other.body.data.id,
    });
    expectError(await t.http.delete(`/admin/notification-recipients/${other.body.data.id}`, { cookie: admin.cookie }), 404, 'NOT_FOUND');
  });

  it('is closed to anonymous callers (401) and non-admins (403)', async () => {
    for (const [method, path] of [
      ['GET', '/admin/notification-recipients'],
      ['POST', '/admin/notification-recipients'],
      ['PATCH', `/admin/notification-recipients/${UNKNOWN}`],
      ['DELETE', `/admin/notification-recipients/${UNKNOWN}`],
    ] as const) {
      const json = method === 'POST' || method === 'PATCH' ? { email: 'a@example.test' } : undefined;
      expectError(await t.http.call(method, path, { json }), 401, 'UNAUTHORIZED');
      expectError(await t.http.call(method, path, { json, cookie: user.cookie }), 403, 'FORBIDDEN');
    }
  });
});

describe('demo requests', () => {
  it('answers 202, records the interaction for the caller and mails every recipient once', async () => {
    const app = await startTestApp();
    try {
      const appAdmin = await createAdmin(app);
      const buyer = await signUp(app, { name: 'Dana Buyer' });
      for (const email of ['a@example.test', 'b@example.test']) {
        await app.http.post('/admin/notification-recipients', { cookie: appAdmin.cookie, json: { email } });
      }
      const agent = await createAgent(app, appAdmin, { name: 'Support Copilot' });
      const res = await app.http.post(`/agents/${agent.id}/demo-requests`, { cookie: buyer.cookie, json: { message: 'Tuesday?' } });
      expect(res.status).toBe(202);
      expect(res.body.data).toMatchObject({ type: 'demo_request', agentId: agent.id });

      const feed = await app.http.get('/admin/interactions?type=demo_request', { cookie: appAdmin.cookie });
      expect(feed.body.data).toHaveLength(1);
      expect(feed.body.data[0]).toMatchObject({
        id: res.body.data.id,
        userId: buyer.userId,
        agentId: agent.id,
        metadata: { email: buyer.email, name: 'Dana Buyer', message: 'Tuesday?' },
      });
      for (const email of ['a@example.test', 'b@example.test']) {
        const mails = await mailsTo(app, email);
        expect(mails).toHaveLength(1);
        expect(mails[0]!.subject).toBe('Demo request: Support Copilot');
        expect(mails[0]!.text).toContain(buyer.email);
        expect(mails[0]!.text).toContain('Tuesday?');
      }
      // Without a message, or without any body, it is still a request.
      expect((await app.http.post(`/agents/${agent.id}/demo-requests`, { cookie: buyer.cookie, json: {} })).status).toBe(202);
      expect((await app.http.post(`/agents/${agent.id}/demo-requests`, { cookie: buyer.cookie })).status).toBe(202);
      expect((await app.http.post(`/agents/${agent.id}/enterprise-inquiries`, { cookie: buyer.cookie })).status).toBe(202);
    } finally {
      await app.close();
    }
  });

  it(`attack: one user's demo requests stop at ${DEMO_REQUESTS_PER_DAY} a day, and no mail goes to staff after that`, async () => {
    // Each mails every notification recipient (the marketplace's staff) with the requester's text; only the per-address
    // limit stood, so one client holding many users' tokens mailed staff without end (found by a review).
    await t.http.post('/admin/notification-recipients', { cookie: admin.cookie, json: { email: 'staff-flood@example.test' } });
    const spammer = await signUp(t);
    const agent = await createAgent(t, admin);
    const request = (who: TestUser) => t.http.post(`/agents/${agent.id}/demo-requests`, { cookie: who.cookie, json: { message: 'Buy gift cards' } });
    for (let i = 0; i < DEMO_REQUESTS_PER_DAY; i++) expect((await request(spammer)).status).toBe(202);
    const refused = await request(spammer);
    expect([refused.status, refused.body.error.code, refused.body.error.details.limitPerDay]).toEqual([429, 'RATE_LIMITED', DEMO_REQUESTS_PER_DAY]);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    const recorded = await rows(t.db, sql`select 1 from interactions where type = 'demo_request' and user_id = ${spammer.userId}`);
    expect(recorded).toHaveLength(DEMO_REQUESTS_PER_DAY);
    expect(await mailsTo(t, 'staff-flood@example.test')).toHaveLength(DEMO_REQUESTS_PER_DAY);
    // Another user is not held back by this one's count.
    expect((await request(await signUp(t))).status).toBe(202);
  });

  it(`attack: one user's enterprise inquiries stop at ${ENTERPRISE_INQUIRIES_PER_DAY} a day, so the staff's feed is not buried`, async () => {
    // Each stores up to 5,000 characters in the staff's interaction feed; only the per-address limit stood, and one
    // account stored 43,200 a day (found by a review). Counted per user and credential, as demo requests are.
    const spammer = await signUp(t);
    const agent = await createAgent(t, admin);
    const inquire = (who: TestUser) =>
      t.http.post(`/agents/${agent.id}/enterprise-inquiries`, { cookie: who.cookie, json: { message: 'x'.repeat(5000), companySize: '1' } });
    for (let i = 0; i < ENTERPRISE_INQUIRIES_PER_DAY; i++) expect((await inquire(spammer)).status).toBe(202);
    const refused = await inquire(spammer);
    expect([refused.status, refused.body.error.code, refused.body.error.details.limitPerDay]).toEqual([
      429,
      'RATE_LIMITED',
      ENTERPRISE_INQUIRIES_PER_DAY,
    ]);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    const recorded = await rows(t.db, sql`select 1 from interactions where type = 'enterprise_inquiry' and user_id = ${spammer.userId}`);
    expect(recorded).toHaveLength(ENTERPRISE_INQUIRIES_PER_DAY);
    // Another user is not held back, and the next day the spammer may ask again.
    expect((await inquire(await signUp(t))).status).toBe(202);
    t.clock.advance(24 * 60 * 60 * 1000 + 1000);
    expect((await inquire(spammer)).status).toBe(202);
  });

  it('needs a signed-in user and a published agent; nothing recorded otherwise', async () => {
    const agent = await createAgent(t, admin);
    expectError(await t.http.post(`/agents/${agent.id}/demo-requests`, { json: {} }), 401, 'UNAUTHORIZED');
    const draft = await createAgent(t, admin, { status: 'draft' });
    expectError(await t.http.post(`/agents/${draft.id}/demo-requests`, { cookie: user.cookie, json: {} }), 404, 'NOT_FOUND');
    expectError(await t.http.post(`/agents/${UNKNOWN}/demo-requests`, { cookie: user.cookie, json: {} }), 404, 'NOT_FOUND');
    expectError(
      await t.http.post(`/agents/${agent.id}/demo-requests`, { cookie: user.cookie, json: { message: 'x'.repeat(2001) } }),
      400,
      'VALIDATION_ERROR',
    );
    const recorded = await rows(t.db, sql`select 1 from interactions where type = 'demo_request' and agent_id in (${agent.id}, ${draft.id})`);
    expect(recorded).toHaveLength(0);
  });

  it("attack: a demo request sent with someone else's unproven address reaches staff marked as not verified", async () => {
    // Was wrong: anyone signed up as cto@victim.example, never verified, and staff were mailed "<cto@victim.example> asked for a demo" (and the feed recorded it) with nothing saying the address was unproven.
    const staff = `sales-${crypto.randomUUID().slice(0, 8)}@example.test`;
    expect((await t.http.post('/admin/notification-recipients', { cookie: admin.cookie, json: { email: staff } })).status).toBe(201);
    const agent = await createAgent(t, admin, { name: 'Contract Copilot' });
    const victim = `cto-${crypto.randomUUID().slice(0, 8)}@victim.example`;
    const squatter = await signUp(t, { email: victim, name: 'Victim CTO' });
    const owner = await signUp(t, { name: 'Proven Buyer', verified: true });
    const ask = (who: TestUser) =>
      t.http.post(`/agents/${agent.id}/demo-requests`, { cookie: who.cookie, json: { message: 'Send the quote to pay.me@attacker.example' } });

    // Accepted all the same (contract.md: "user; 202"), but staff can tell the address was never proved.
    const squatted = await ask(squatter);
    expect(squatted.status).toBe(202);
    const proven = await ask(owner);
    expect(proven.status).toBe(202);
    const mails = await mailsTo(t, staff);
    expect(mails).toHaveLength(2);
    const firstLine = (email: string) => mails.find((m) => m.text.includes(email))!.text.split('\n')[0];
    expect(firstLine(victim)).toBe(`"Victim CTO" <${victim}> (address not verified) asked for a demo of Contract Copilot (${agent.slug}).`);
    expect(firstLine(owner.email)).toBe(`"Proven Buyer" <${owner.email}> asked for a demo of Contract Copilot (${agent.slug}).`);
    expect(mails.find((m) => m.text.includes(owner.email))!.text).not.toMatch(/not verified|unverified/i);

    // The feed records it too, for demo requests and enterprise inquiries alike.
    const inquired = await t.http.post(`/agents/${agent.id}/enterprise-inquiries`, { cookie: squatter.cookie, json: { companySize: '1-10' } });
    const inquiredProven = await t.http.post(`/agents/${agent.id}/enterprise-inquiries`, { cookie: owner.cookie, json: {} });
    expect([inquired.status, inquiredProven.status]).toEqual([202, 202]);
    const feed = (await t.http.get('/admin/interactions?limit=20', { cookie: admin.cookie })).body.data;
    const metadataOf = (res: { body: any }) => feed.find((i: any) => i.id === res.body.data.id)?.metadata;
    expect(metadataOf(squatted)).toMatchObject({ email: victim, emailVerified: false });
    expect(metadataOf(proven)).toMatchObject({ email: owner.email, emailVerified: true });
    expect(metadataOf(inquired)).toMatchObject({ email: victim, emailVerified: false, companySize: '1-10' });
    expect(metadataOf(inquiredProven)).toMatchObject({ email: owner.email, emailVerified: true });
  });
});

describe('one address, many accounts (review 33)', () => {
  // Accounts cost nothing (sign-up needs no verified address), so a script moving to a fresh account whenever one's
  // day was used up sent staff 60 demo-request mails from one address in two minutes. Requests with users' own
  // credentials are now counted per client address too; an agent backend's, with its users' tokens, are not (its
  // address is shared by all the agent's users). The app believes X-Forwarded-For from the test's loopback proxy.
  let p: TestApp;
  let staffAdmin: TestUser;
  beforeAll(async () => {
    p = await startTestApp({ env: { TRUSTED_PROXIES: '127.0.0.1, ::1' } });
    staffAdmin = await createAdmin(p);
  });
  afterAll(() => p.close());
  const from = (ip: string) => ({ 'x-forwarded-for': ip });

  it(`attack: fresh accounts from one address mail staff at most ${DEMO_REQUESTS_PER_ADDRESS_PER_DAY} demo requests a day; another address, and an agent's backend with its users' tokens, are not held back`, async () => {
    const staff = `staff-${crypto.randomUUID().slice(0, 8)}@example.test`;
    expect((await p.http.post('/admin/notification-recipients', { cookie: staffAdmin.cookie, json: { email: staff } })).status).toBe(201);
    const agent = await createAgent(p, staffAdmin);
    const request = (auth: { cookie: string } | { bearer: string }, ip: string) =>
      p.http.post(`/agents/${agent.id}/demo-requests`, { ...auth, headers: from(ip), json: { message: 'Buy gift cards at evil.example' } });

    // The agent's backend, at 203.0.113.7, asks for more of its users than the address's bound: none is refused, and
    // none is counted against the address.
    const backendUsers = Math.ceil(DEMO_REQUESTS_PER_ADDRESS_PER_DAY / DEMO_REQUESTS_PER_DAY) + 1;
    for (let u = 0; u < backendUsers; u++) {
      const { accessToken } = await accessTokenFor(p, await signUp(p), { agentId: agent.id });
      for (let i = 0; i < DEMO_REQUESTS_PER_DAY; i++) expect((await request({ bearer: accessToken }, '203.0.113.7')).status).toBe(202);
    }

    // A script at the same address with throwaway accounts of its own stops at the address's bound.
    const statuses: number[] = [];
    for (let a = 0; a < DEMO_REQUESTS_PER_ADDRESS_PER_DAY / DEMO_REQUESTS_PER_DAY + 2; a++) {
      const account = await signUp(p);
      for (let i = 0; i < DEMO_REQUESTS_PER_DAY; i++) statuses.push((await request({ cookie: account.cookie }, '203.0.113.7')).status);
    }
    expect(statuses.filter((s) => s === 202)).toHaveLength(DEMO_REQUESTS_PER_ADDRESS_PER_DAY);
    expect(statuses.slice(DEMO_REQUESTS_PER_ADDRESS_PER_DAY).every((s) => s === 429)).toBe(true);
    const late = await signUp(p);
    const refused = await request({ cookie: late.cookie }, '203.0.113.7');
    expect([refused.status, refused.body.error.code, refused.body.error.details.limitPerDay]).toEqual([429, 'RATE_LIMITED', DEMO_REQUESTS_PER_ADDRESS_PER_DAY]);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await mailsTo(p, staff)).toHaveLength(backendUsers * DEMO_REQUESTS_PER_DAY + DEMO_REQUESTS_PER_ADDRESS_PER_DAY);

    // Another address is not held back, and the refusal at the used-up one spent none of the late account's own day.
    for (let i = 0; i < DEMO_REQUESTS_PER_DAY; i++) expect((await request({ cookie: late.cookie }, '198.51.100.20')).status).toBe(202);
  });

  it(`attack: fresh accounts from one address store at most ${ENTERPRISE_INQUIRIES_PER_ADDRESS_PER_DAY} enterprise inquiries a day in the staff's feed; another address is not held back`, async () => {
    const agent = await createAgent(p, staffAdmin);
    const inquire = (cookie: string, ip: string) =>
      p.http.post(`/agents/${agent.id}/enterprise-inquiries`, { cookie, headers: from(ip), json: { message: 'x'.repeat(5000), companySize: '1' } });
    const statuses: number[] = [];
    for (let a = 0; a < ENTERPRISE_INQUIRIES_PER_ADDRESS_PER_DAY / ENTERPRISE_INQUIRIES_PER_DAY + 2; a++) {
      const account = await signUp(p);
      for (let i = 0; i < ENTERPRISE_INQUIRIES_PER_DAY; i++) statuses.push((await inquire(account.cookie, '203.0.113.8')).status);
    }
    expect(statuses.filter((s) => s === 202)).toHaveLength(ENTERPRISE_INQUIRIES_PER_ADDRESS_PER_DAY);
    expect(statuses.slice(ENTERPRISE_INQUIRIES_PER_ADDRESS_PER_DAY).every((s) => s === 429)).toBe(true);
    const stored = async () => (await rows(p.db, sql`select 1 from interactions where type = 'enterprise_inquiry' and agent_id = ${agent.id}`)).length;
    expect(await stored()).toBe(ENTERPRISE_INQUIRIES_PER_ADDRESS_PER_DAY);
    expect((await inquire((await signUp(p)).cookie, '198.51.100.21')).status).toBe(202);
    expect(await stored()).toBe(ENTERPRISE_INQUIRIES_PER_ADDRESS_PER_DAY + 1);
  });
});

describe('a requester name that would write the staff mail itself', () => {
  it("attack: a name with line breaks cannot write the mail's first line or push the not-verified marker out of it", async () => {
    // Found by review 19: the name went into the first line as it was, so a name of several lines wrote that line
    // ("Victim CTO <cto@victim.example> asked for a demo ...") and pushed the real, marked one far down.
    const staff = `sales-${crypto.randomUUID().slice(0, 8)}@example.test`;
    expect((await t.http.post('/admin/notification-recipients', { cookie: admin.cookie, json: { email: staff } })).status).toBe(201);
    const agent = await createAgent(t, admin, { name: 'Contract Copilot' });
    const victim = `cto-${crypto.randomUUID().slice(0, 8)}@victim.example`;
    const forged = `Victim CTO <${victim}> asked for a demo of Contract Copilot (${agent.slug}).\n\n\n\n`;
    // Such a name is refused when it is typed ...
    const refused = await t.http.post('/api/auth/sign-up/email', { json: { email: victim, password: 'a long enough password', name: forged } });
    expect(refused.status).toBe(400);
    // ... and one stored before that rule is quoted on one line.
    const squatter = await signUp(t, { email: victim, name: 'Victim CTO' });
    await sql`update "user" set name = ${forged} where id = ${squatter.userId}`.execute(t.db);
    expect((await t.http.post(`/agents/${agent.id}/demo-requests`, { cookie: squatter.cookie, json: {} })).status).toBe(202);
    const [mail] = await mailsTo(t, staff);
    const firstLine = mail!.text.split('\n')[0]!;
    expect(firstLine.startsWith('"Victim CTO <')).toBe(true);
    expect(firstLine).toContain(`" <${victim}> (address not verified) asked for a demo of Contract Copilot (${agent.slug}).`);
  });

  it('attack: a name with a right-to-left override, which shows a forged address reversed into the right order, is refused and quoted without it', async () => {
    // Review 63's rule for one line (functions/platform/text.ts): U+202E makes "<cto@victim.example>" of the reversed
    // text after it, in any mail reader or admin page that shows the name.
    const staff = `sales-${crypto.randomUUID().slice(0, 8)}@example.test`;
    expect((await t.http.post('/admin/notification-recipients', { cookie: admin.cookie, json: { email: staff } })).status).toBe(201);
    const agent = await createAgent(t, admin, { name: 'Contract Copilot' });
    const squatterEmail = `squat-${crypto.randomUUID().slice(0, 8)}@example.test`;
    const forged = 'Victim CTO \u202e>elpmaxe.mitciv@otc<';
    const refused = await t.http.post('/api/auth/sign-up/email', { json: { email: squatterEmail, password: 'a long enough password', name: forged } });
    expect(refused.status, refused.text).toBe(400);
    const squatter = await signUp(t, { email: squatterEmail, name: 'Victim CTO' });
    const renamed = await t.http.post('/api/auth/update-user', { cookie: squatter.cookie, headers: { origin: t.baseUrl }, json: { name: forged } });
    expect(renamed.status, renamed.text).toBe(400);
    await sql`update "user" set name = ${forged} where id = ${squatter.userId}`.execute(t.db);
    expect((await t.http.post(`/agents/${agent.id}/demo-requests`, { cookie: squatter.cookie, json: {} })).status).toBe(202);
    const [mail] = await mailsTo(t, staff);
    expect(mail!.text.split('\n')[0]).toContain(`"Victim CTO >elpmaxe.mitciv@otc<" <${squatterEmail}>`);
    expect(mail!.text).not.toContain('\u202e');
  });

  it("attack (review 74): a message cannot write the mail's own lines: it comes last, every line of it quoted", async () => {
    // The message went into the mail as it came, above the mail's own "Agent:" and "Requested at:" lines: one
    // signed-up account (or an agent's backend holding a user's token) wrote a second "... asked for a demo" line with
    // another person's address and no marker, and an "Agent:" link to its own site, shown before the real one.
    const staff = `sales-${crypto.randomUUID().slice(0, 8)}@example.test`;
    expect((await t.http.post('/admin/notification-recipients', { cookie: admin.cookie, json: { email: staff } })).status).toBe(201);
    const agent = await createAgent(t, admin, { name: 'Contract Copilot' });
    const requester = await signUp(t, { name: 'Mallory' });
    const forged =
      'Thanks.\r\n\n' +
      `"Jane Roe, CFO" <cfo@bigcorp.example> asked for a demo of Contract Copilot (${agent.slug}).\u2028` +
      'Agent: https://evil.example/pay-the-invoice\rRequested at: 2026-11-28T09:00:00.000Z\u0085\u202eok';
    expect((await t.http.post(`/agents/${agent.id}/demo-requests`, { cookie: requester.cookie, json: { message: forged } })).status).toBe(202);
    const mails = await mailsTo(t, staff);
    expect(mails).toHaveLength(1);
    for (const mail of mails) {
      const lines = mail.text.split('\n');
      expect(lines.slice(1, 5)).toEqual([`Agent: ${t.baseUrl}/agents/${agent.id}`, lines[2], '', 'Their message, as they wrote it:']);
      expect(lines[2]).toMatch(/^Requested at: \d{4}-/);
      expect(lines.slice(5)).toEqual([
        '> Thanks.',
        '>',
        `> "Jane Roe, CFO" <cfo@bigcorp.example> asked for a demo of Contract Copilot (${agent.slug}).`,
        '> Agent: https://evil.example/pay-the-invoice',
        '> Requested at: 2026-11-28T09:00:00.000Z',
        '> ok',
      ]);
    }
  });
});

describe('enterprise inquiries', () => {
  it('answers 202 with message and company size in the interaction metadata', async () => {
    const agent = await createAgent(t, admin);
    const res = await t.http.post(`/agents/${agent.id}/enterprise-inquiries`, {
      cookie: user.cookie,
      json: { message: 'We have 400 seats', companySize: '201-500' },
    });
    expect(res.status).toBe(202);
    const feed = await t.http.get('/admin/interactions?type=enterprise_inquiry', { cookie: admin.cookie });
    const mine = feed.body.data.find((i: any) => i.id === res.body.data.id);
    expect(mine).toMatchObject({ userId: user.userId, agentId: agent.id, metadata: { message: 'We have 400 seats', companySize: '201-500' } });
  });

  it('answers 401 anonymously, 404 for unknown agents, 400 for bad input', async () => {
    const agent = await createAgent(t, admin);
    expectError(await t.http.post(`/agents/${agent.id}/enterprise-inquiries`, { json: {} }), 401, 'UNAUTHORIZED');
    expectError(await t.http.post(`/agents/${UNKNOWN}/enterprise-inquiries`, { cookie: user.cookie, json: {} }), 404, 'NOT_FOUND');
    expectError(
      await t.http.post(`/agents/${agent.id}/enterprise-inquiries`, { cookie: user.cookie, json: { companySize: 12 } }),
      400,
      'VALIDATION_ERROR',
    );
  });
});

describe('waitlist', () => {
  it('adds an email once (201, then 200), records one interaction, and reports status to its owner only', async () => {
    const agent = await createAgent(t, admin, { status: 'coming_soon' });
    const base = `/agents/${agent.id}/waitlist`;
    expect((await t.http.get(base)).body.data).toEqual({ notified: false });
    expect((await t.http.get(base, { cookie: user.cookie })).body.data).toEqual({ notified: false });

    const joined = await t.http.post(base, { json: { email: user.email.toUpperCase() } });
    expect(joined.status).toBe(201);
    expect(joined.body.data).toMatchObject({ agentId: agent.id, email: user.email, notified: true });
    t.clock.advance(60_000);
    const again = await t.http.post(base, { json: { email: user.email } });
    expect(again.status).toBe(200);
    // A duplicate answers the time of this request, never the entry's own (the stranger's attack below).
    expect(again.body.data).toEqual({ ...joined.body.data, createdAt: t.clock.now().toISOString() });

    // Dana's address is not verified yet: an address proves nothing until then (next test)
    expect((await t.http.get(base, { cookie: user.cookie })).body.data).toEqual({ notified: false });
    await verifyEmail(t, user.email);
    expect((await t.http.get(base, { cookie: user.cookie })).body.data).toEqual({ notified: true });
    expect((await t.http.get(base)).body.data).toEqual({ notified: false });
    const stranger = await signUp(t);
    expect((await t.http.get(base, { cookie: stranger.cookie })).body.data).toEqual({ notified: false });

    const events = await rows(t.db, sql`select 1 from interactions where type = 'waitlist_signup' and agent_id = ${agent.id}`);
    expect(events).toHaveLength(1);
  });

  it("attack: an account made with someone else's address and never verified does not read that address's entries", async () => {
    // Anyone may sign up with an address that is not theirs; the status then told them which coming-soon agents the
    // address's owner had joined the waitlist of (found by a review).
    const agent = await createAgent(t, admin, { status: 'coming_soon' });
    const base = `/agents/${agent.id}/waitlist`;
    const victim = `victim-${crypto.randomUUID().slice(0, 8)}@example.test`;
    expect((await t.http.post(base, { json: { email: victim } })).status).toBe(201);
    const squatter = await signUp(t, { email: victim });
    expect((await t.http.get(base, { cookie: squatter.cookie })).body.data).toEqual({ notified: false });
    // Once the address is proved (the mailed link followed), its holder sees the entry.
    await verifyEmail(t, victim);
    expect((await t.http.get(base, { cookie: squatter.cookie })).body.data).toEqual({ notified: true });
  });

  it("attack: a stranger does not learn when an address joined a coming-soon agent's waitlist", async () => {
    // Was wrong: joining is public and anonymous, and a duplicate join answered the stored entry, whose createdAt told whoever typed an address since when its owner had been on the list.
    const soon = await createAgent(t, admin, { status: 'coming_soon' });
    const base = `/agents/${soon.id}/waitlist`;
    const victim = `buyer-${crypto.randomUUID().slice(0, 8)}@bigcorp.example`;
    const joined = await t.http.post(base, { json: { email: victim } });
    expect(joined.status).toBe(201);
    t.clock.advance(3 * 24 * 60 * 60 * 1000);

    const probe = await t.http.post(base, { json: { email: victim } });
    expect(probe.status).toBe(200);
    expect(probe.body.data.createdAt).not.toBe(joined.body.data.createdAt);
    expect(probe.body.data).toEqual({ agentId: soon.id, email: victim, notified: true, createdAt: t.clock.now().toISOString() });
  });

  it('stays one entry under parallel joins of the same email', async () => {
    const agent = await createAgent(t, admin, { status: 'coming_soon' });
    const results = await Promise.all(
      Array.from({ length: 10 }, () => t.http.post(`/agents/${agent.id}/waitlist`, { json: { email: 'crowd@example.test' } })),
    );
    expect(results.filter((r) => r.status === 201)).toHaveLength(1);
    expect(results.filter((r) => r.status === 200)).toHaveLength(9);
    expect(await rows(t.db, sql`select 1 from waitlist_entries where agent_id = ${agent.id}`)).toHaveLength(1);
  });

  it('is only for coming-soon agents (422), and answers 404 for hidden or unknown agents, 400 for a bad email', async () => {
    const active = await createAgent(t, admin);
    expectError(await t.http.post(`/agents/${active.id}/waitlist`, { json: { email: 'a@example.test' } }), 422, 'INVALID_STATE');
    const draft = await createAgent(t, admin, { status: 'draft' });
    expectError(await t.http.post(`/agents/${draft.id}/waitlist`, { json: { email: 'a@example.test' } }), 404, 'NOT_FOUND');
    expectError(await t.http.get(`/agents/${UNKNOWN}/waitlist`), 404, 'NOT_FOUND');
    const soon = await createAgent(t, admin, { status: 'coming_soon' });
    expectError(await t.http.post(`/agents/${soon.id}/waitlist`, { json: { email: 'not-an-email' } }), 400, 'VALIDATION_ERROR');
    expect(await rows(t.db, sql`select 1 from waitlist_entries where agent_id in (${active.id}, ${soon.id})`)).toHaveLength(0);
  });

  it('is rate limited per client as a public write', async () => {
    const limited = await startTestApp({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '3' } });
    try {
      const agent = await insertAgent(limited.db, { status: 'coming_soon' });
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++) {
        statuses.push((await limited.http.post(`/agents/${agent.id}/waitlist`, { json: { email: `p${i}@example.test` } })).status);
      }
      expect(statuses).toEqual([201, 201, 201, 429]);
      const last = await limited.http.post(`/agents/${agent.id}/waitlist`, { json: { email: 'late@example.test' } });
      expectError(last, 429, 'RATE_LIMITED');
      expect(last.headers.get('retry-after')).toMatch(/^\d+$/);
      limited.clock.advance(61_000);
      expect((await limited.http.post(`/agents/${agent.id}/waitlist`, { json: { email: 'late@example.test' } })).status).toBe(201);
    } finally {
      await limited.close();
    }
  });
});

describe('telemetry', () => {
  it('answers 501 NOT_IMPLEMENTED', async () => {
    const agent = await createAgent(t, admin);
    expectError(await t.http.get(`/agents/${agent.id}/telemetry`), 501, 'NOT_IMPLEMENTED');
    expectError(await t.http.get('/agents/not-a-uuid/telemetry'), 400, 'VALIDATION_ERROR');
  });
});

describe('GET /admin/interactions', () => {
  it('lists every interaction newest first, page by page, filtered by type within the pages', async () => {
    const app = await startTestApp();
    try {
      const appAdmin = await createAdmin(app);
      const agent = await createAgent(app, appAdmin);
      const buyers: TestUser[] = [];
      for (let i = 0; i < 3; i++) {
        app.clock.advance(1000);
        const buyer = await signUp(app);
        buyers.push(buyer);
        app.clock.advance(1000);
        await app.http.post(`/agents/${agent.id}/install`, { cookie: buyer.cookie });
        app.clock.advance(1000);
        await app.http.post(`/agents/${agent.id}/enterprise-inquiries`, { cookie: buyer.cookie, json: {} });
      }
      const all = await walk(app, '/admin/interactions', { limit: 2, cookie: appAdmin.cookie });
      expect(new Set(all.map((i) => i.id)).size).toBe(all.length);
      const times = all.map((i) => i.createdAt);
      expect([...times].sort().reverse()).toEqual(times);
      expect(all.filter((i) => i.type === 'install')).toHaveLength(3);
      expect(all.filter((i) => i.type === 'enterprise_inquiry')).toHaveLength(3);

      const installs = await walk(app, '/admin/interactions?type=install', { limit: 2, cookie: appAdmin.cookie });
      expect(installs.map((i) => i.userId)).toEqual(buyers.map((b) => b.userId).reverse());
      const page = await app.http.get('/admin/interactions?limit=2', { cookie: appAdmin.cookie });
      expectError(
        await app.http.get(`/admin/interactions?type=install&cursor=${page.body.pagination.cursor}`, { cookie: appAdmin.cookie }),
        400,
        'INVALID_CURSOR',
      );
      expectError(await app.http.get('/admin/interactions?type=purchase', { cookie: appAdmin.cookie }), 400, 'VALIDATION_ERROR');
    } finally {
      await app.close();
    }
  });

  it('is admin only', async () => {
    expectError(await t.http.get('/admin/interactions'), 401, 'UNAUTHORIZED');
    expectError(await t.http.get('/admin/interactions', { cookie: user.cookie }), 403, 'FORBIDDEN');
  });
});

describe('pricing', () => {
  it('lists public tiers cheapest first to the public, all tiers to admins, always ending with Enterprise', async () => {
    const agent = await insertAgent(t.db);
    const pro = await insertTier(t.db, agent.id, { name: 'Pro', priceCents: 2900, features: ['More runs'] });
    const free = await insertTier(t.db, agent.id, { name: 'Free', priceCents: 0 });
    const custom = await insertTier(t.db, agent.id, { name: 'Custom ACME', priceCents: 99900, isPublic: false });

    const open = await t.http.get(`/agents/${agent.id}/pricing`, { cookie: user.cookie });
    expect(open.status).toBe(200);
    expect(open.body.data.map((x: any) => x.id)).toEqual([free.id, pro.id, 'enterprise']);
    expect(open.body.data[1]).toMatchObject({
      name: 'Pro',
      priceCents: 2900,
      currency: 'usd',
      interval: 'month',
      isPublic: true,
      features: ['More runs'],
      contactSales: false,
    });
    expect(open.body.data[2]).toMatchObject({ id: 'enterprise', name: 'Enterprise', contactSales: true, priceCents: null });
    expect(open.text).not.toContain('stripe');

    const all = await t.http.get(`/agents/${agent.id}/pricing`, { cookie: admin.cookie });
    expect(all.body.data.map((x: any) => x.id)).toEqual([free.id, pro.id, custom.id, 'enterprise']);

    const none = await insertAgent(t.db);
    expect((await t.http.get(`/agents/${none.id}/pricing`)).body.data.map((x: any) => x.id)).toEqual(['enterprise']);
    expectError(await t.http.get(`/agents/${UNKNOWN}/pricing`), 404, 'NOT_FOUND');
    const hidden = await insertAgent(t.db, { status: 'inactive' });
    expectError(await t.http.get(`/agents/${hidden.id}/pricing`), 404, 'NOT_FOUND');
  });

  it('toggles visibility in place and touches nothing else', async () => {
    const agent = await insertAgent(t.db);
    const tier = await insertTier(t.db, agent.id, { name: 'Team', priceCents: 4900, stripeProductId: 'prod_1', stripePriceId: 'price_1' });
    const path = `/agents/${agent.id}/pricing/${tier.id}/visibility`;
    const hide = await t.http.patch(path, { cookie: admin.cookie, json: { isPublic: false } });
    expect(hide.status).toBe(200);
    expect(hide.body.data).toMatchObject({ id: tier.id, isPublic: false, name: 'Team', priceCents: 4900 });
    expect((await t.http.get(`/agents/${agent.id}/pricing`)).body.data.map((x: any) => x.id)).toEqual(['enterprise']);
    const [row] = await rows<any>(t.db, sql`select name, price_cents, stripe_product_id, stripe_price_id, features from tiers where id = ${tier.id}`);
    expect(row).toEqual({ name: 'Team', price_cents: 4900, stripe_product_id: 'prod_1', stripe_price_id: 'price_1', features: [] });
    const show = await t.http.patch(path, { cookie: admin.cookie, json: { isPublic: true } });
    expect(show.body.data.isPublic).toBe(true);

    expectError(await t.http.patch(path, { json: { isPublic: false } }), 401, 'UNAUTHORIZED');
    expectError(await t.http.patch(path, { cookie: user.cookie, json: { isPublic: false } }), 403, 'FORBIDDEN');
    expectError(await t.http.patch(path, { cookie: admin.cookie, json: { isPublic: 'no' } }), 400, 'VALIDATION_ERROR');
    expectError(await t.http.patch(`/agents/${agent.id}/pricing/${UNKNOWN}/visibility`, { cookie: admin.cookie, json: { isPublic: false } }), 404, 'NOT_FOUND');
    const other = await insertAgent(t.db);
    expectError(await t.http.patch(`/agents/${other.id}/pricing/${tier.id}/visibility`, { cookie: admin.cookie, json: { isPublic: false } }), 404, 'NOT_FOUND');
    expect((await t.http.get(`/agents/${agent.id}/pricing`)).body.data).toHaveLength(2);
  });

  it('leaves tiers archived by billing out of every listing, and out of the toggle', async () => {
    const agent = await insertAgent(t.db);
    const kept = await insertTier(t.db, agent.id, { name: 'Kept', priceCents: 0 });
    const old = await insertTier(t.db, agent.id, { name: 'Old', priceCents: 500 });
    await sql`update tiers set archived_at = now(), is_public = false where id = ${old.id}`.execute(t.db);
    const all = await t.http.get(`/agents/${agent.id}/pricing`, { cookie: admin.cookie });
    expect(all.body.data.map((x: any) => x.id)).toEqual([kept.id, 'enterprise']);
    expectError(
      await t.http.patch(`/agents/${agent.id}/pricing/${old.id}/visibility`, { cookie: admin.cookie, json: { isPublic: true } }),
      404,
      'NOT_FOUND',
    );
  });
});
