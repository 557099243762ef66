import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { mailsTo } from '../support/mail.ts';
import { accessTokenFor } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { createAgent } from './helpers.ts';

/**
 * Engagement routes called by an agent's backend with a user's access token (review 27). contract.md lets a token ask
 * within its agent; what the agent learns of the user and what staff read must still be what the user allowed and
 * said: the waitlist status answers about the user's address only with the `email` scope (as GET /me), and a demo
 * request or an enterprise inquiry sent by the agent's backend says so, to staff and in the feed.
 */
let t: TestApp;
let admin: TestUser;

beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

describe("an agent's backend asking staff with the user's token (review 27)", () => {
  it('a demo request and an enterprise inquiry sent with an agent\'s token say so, to staff and in the feed', async () => {
    const staff = `sales-${crypto.randomUUID().slice(0, 8)}@example.test`;
    expect((await t.http.post('/admin/notification-recipients', { cookie: admin.cookie, json: { email: staff } })).status).toBe(201);
    const agent = await createAgent(t, admin, { name: 'Pushy Agent' });
    const ada = await signUp(t, { name: 'Ada Private', verified: true });
    const { accessToken } = await accessTokenFor(t, ada, { agentId: agent.id, scope: 'openid' });
    const demo = await t.http.post(`/agents/${agent.id}/demo-requests`, { bearer: accessToken, json: { message: 'Call me about 500 seats.' } });
    expect(demo.status, demo.text).toBe(202);
    const inquiry = await t.http.post(`/agents/${agent.id}/enterprise-inquiries`, { bearer: accessToken, json: { message: 'Quote please' } });
    expect(inquiry.status, inquiry.text).toBe(202);
    const [mail] = await mailsTo(t, staff);
    expect(mail!.text.split('\n')[0]).toContain("as sent by the agent's own backend with this user's sign-in (not by the user on the marketplace)");
    const feed = await rows<{ type: string; metadata: Record<string, unknown> }>(
      t.db,
      sql`select type, metadata from public.interactions where user_id = ${ada.userId} and type in ('demo_request', 'enterprise_inquiry') order by created_at`,
    );
    expect(feed.map((r) => [r.type, r.metadata.sentByAgentBackend])).toEqual([
      ['demo_request', true],
      ['enterprise_inquiry', true],
    ]);
    // the user's own request (their session) is theirs
    const own = await t.http.post(`/agents/${agent.id}/demo-requests`, { cookie: ada.cookie, headers: { origin: t.baseUrl }, json: {} });
    expect(own.status).toBe(202);
    const mails = await mailsTo(t, staff);
    expect(mails.some((m) => !m.text.includes("agent's own backend"))).toBe(true);
  });
});

describe("the waitlist status and an agent's token (review 27)", () => {
  it("attack: an agent the user did not grant the email cannot learn the address by guessing it onto its waitlist", async () => {
    const agent = await createAgent(t, admin, { status: 'coming_soon' });
    const ada = await signUp(t, { verified: true });
    const { accessToken } = await accessTokenFor(t, ada, { agentId: agent.id, scope: 'openid' });
    expect((await t.http.post(`/agents/${agent.id}/waitlist`, { json: { email: ada.email } })).status).toBe(201);
    const status = await t.http.get(`/agents/${agent.id}/waitlist`, { bearer: accessToken });
    expect([status.status, status.body.data.notified]).toEqual([200, false]);
    // with the email granted, the agent reads what the user's session reads
    const granted = await accessTokenFor(t, ada, { agentId: agent.id, scope: 'openid email' });
    expect((await t.http.get(`/agents/${agent.id}/waitlist`, { bearer: granted.accessToken })).body.data.notified).toBe(true);
    expect((await t.http.get(`/agents/${agent.id}/waitlist`, { cookie: ada.cookie })).body.data.notified).toBe(true);
  });
});
