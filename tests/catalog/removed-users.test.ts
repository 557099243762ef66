import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, verifyEmail, type TestUser } from '../support/users.ts';
import { createAgent, walk } from './helpers.ts';

/**
 * Removing a user (the auth library's POST /api/auth/admin/remove-user, for platform admins) is erasure: what they
 * left in the catalog goes with them (migration 20261127000200, found by a hostile review of the catalog room).
 */

let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

const removeUser = (userId: string) =>
  t.http.post('/api/auth/admin/remove-user', { cookie: admin.cookie, headers: { origin: t.baseUrl }, json: { userId } });

describe('a removed user', () => {
  it("attack: a removed account's reviews no longer decide how buyers see the agent (they were listed and counted)", async () => {
    // A ban hid a review-bomber's reviews; removing the account, the harder measure, left every one of them.
    const agent = await createAgent(t, admin);
    const reviews = `/agents/${agent.id}/reviews`;
    const [fan, bomber] = [await signUp(t), await signUp(t)];
    expect((await t.http.put(reviews, { cookie: fan.cookie, json: { rating: 5 } })).status).toBe(201);
    const bombed = (await t.http.put(reviews, { cookie: bomber.cookie, json: { rating: 1, title: 'Scam', body: 'Insults' } })).body.data;
    expect((await t.http.get(`/agents/${agent.id}`)).body.data).toMatchObject({ reviewCount: 2, averageRating: 3 });

    const removed = await removeUser(bomber.userId);
    expect(removed.status, removed.text).toBe(200);

    expect((await t.http.get(reviews)).body.data.map((r: { id: string }) => r.id)).not.toContain(bombed.id);
    expect((await t.http.get(`/agents/${agent.id}`)).body.data).toMatchObject({ reviewCount: 1, averageRating: 5 });
    expect(await rows(t.db, sql`select id from reviews where user_id = ${bomber.userId}`)).toEqual([]);
  });

  it('attack: installs of accounts made to inflate the counter stop counting when the accounts are removed', async () => {
    const agent = await createAgent(t, admin);
    const [real, fake1, fake2] = [await signUp(t), await signUp(t), await signUp(t)];
    for (const user of [real, fake1, fake2]) {
      expect((await t.http.post(`/agents/${agent.id}/install`, { cookie: user.cookie })).status).toBe(200);
    }
    expect((await t.http.get(`/agents/${agent.id}`)).body.data.installs).toBe(3);
    for (const fake of [fake1, fake2]) expect((await removeUser(fake.userId)).status).toBe(200);
    expect((await t.http.get(`/agents/${agent.id}`)).body.data.installs).toBe(1);
    // the one left is still installed once: installing again counts nothing
    expect((await t.http.post(`/agents/${agent.id}/install`, { cookie: real.cookie })).body.data).toMatchObject({ installs: 1 });
  });

  it("attack: a removed user's email, name and messages leave the interaction feed; the rows stay, anonymous", async () => {
    // Migration 20261122000200 said "a deleted user's rows stay, anonymous", and their metadata kept the email and name.
    const agent = await createAgent(t, admin);
    const soon = await createAgent(t, admin, { status: 'coming_soon' });
    const person = await signUp(t, { name: 'Erase Me Please' });
    const message = 'call me on my private number';
    expect((await t.http.post(`/agents/${agent.id}/demo-requests`, { cookie: person.cookie, json: { message } })).status).toBe(202);
    expect((await t.http.post(`/agents/${agent.id}/enterprise-inquiries`, { cookie: person.cookie, json: { companySize: '11-50' } })).status).toBe(202);
    expect((await t.http.post(`/agents/${soon.id}/waitlist`, { cookie: person.cookie, json: { email: person.email } })).status).toBe(201);
    const mine = async () =>
      (await walk(t, '/admin/interactions', { cookie: admin.cookie, limit: 100 })).filter(
        (i: any) => i.userId === person.userId || [person.email, person.name, message].some((v) => JSON.stringify(i.metadata).includes(v)),
      );
    expect((await mine()).length).toBe(4); // signup, demo request, inquiry, waitlist

    expect((await removeUser(person.userId)).status).toBe(200);

    expect(await mine()).toEqual([]);
    const kept = await rows<{ type: string; user_id: string | null; metadata: Record<string, unknown> }>(
      t.db,
      sql`select type, user_id, metadata from interactions
          where type <> 'install' and agent_id in (${agent.id}, ${soon.id}) order by type`,
    );
    // what is left says nothing about who it was (emailVerified is whether the address had been proved, not which)
    expect(kept).toEqual([
      { type: 'demo_request', user_id: null, metadata: { emailVerified: false } },
      { type: 'enterprise_inquiry', user_id: null, metadata: { companySize: '11-50', emailVerified: false } },
      { type: 'waitlist_signup', user_id: null, metadata: {} },
    ]);
    // their waitlist entry is no longer theirs; it stays, since they never proved the address (see the squatter below)
    expect(await rows(t.db, sql`select user_id from waitlist_entries where email = ${person.email.toLowerCase()}`)).toEqual([{ user_id: null }]);
  });

  it("attack: a waitlist join made signed out with the user's proved address leaves the feed with them (review 29)", async () => {
    const soon = await createAgent(t, admin, { status: 'coming_soon' });
    const person = await signUp(t, { verified: true });
    expect((await t.http.post(`/agents/${soon.id}/waitlist`, { json: { email: person.email } })).status).toBe(201);
    const feed = async () =>
      (await walk(t, '/admin/interactions', { cookie: admin.cookie, limit: 100 })).filter((i: any) => JSON.stringify(i.metadata).includes(person.email.toLowerCase()));
    expect((await feed()).map((i: any) => i.type)).toContain('waitlist_signup');
    expect((await removeUser(person.userId)).status).toBe(200);
    expect(await feed()).toEqual([]);
    const kept = await rows<{ metadata: Record<string, unknown> }>(t.db, sql`select metadata from interactions where type = 'waitlist_signup' and agent_id = ${soon.id}`);
    expect(kept).toEqual([{ metadata: {} }]);
  });

  it("attack: a waitlist join another signed-in account made with the user's proved address leaves the feed with them (review 71)", async () => {
    const soon = await createAgent(t, admin, { status: 'coming_soon' });
    const owner = await signUp(t, { verified: true });
    const other = await signUp(t); // a colleague, or the owner's second account
    expect((await t.http.post(`/agents/${soon.id}/waitlist`, { cookie: other.cookie, json: { email: owner.email } })).status).toBe(201);
    const joins = async () => (await walk(t, '/admin/interactions?type=waitlist_signup', { cookie: admin.cookie, limit: 100 })).filter((i: any) => i.agentId === soon.id);
    expect((await joins()).map((i: any) => [i.userId, i.metadata])).toEqual([[other.userId, { email: owner.email.toLowerCase() }]]);
    expect((await removeUser(owner.userId)).status).toBe(200);
    // the row stays, the joining account's, without the removed owner's address
    expect((await joins()).map((i: any) => [i.userId, i.metadata])).toEqual([[other.userId, {}]]);
  });

  it("attack: removing an account that never proved its address leaves the address owner's waitlist entries", async () => {
    // The removal erased every entry of the account's address, whoever made it: an account squatting someone's address
    // (sign-up needs no verified address), once removed, took that person's own entries with it (found by a review).
    const soon = await createAgent(t, admin, { status: 'coming_soon' });
    const victim = `owner-${crypto.randomUUID().slice(0, 8)}@example.test`;
    expect((await t.http.post(`/agents/${soon.id}/waitlist`, { json: { email: victim } })).status).toBe(201); // signed out
    const squatter = await signUp(t, { email: victim });
    expect((await removeUser(squatter.userId)).status).toBe(200);
    // the real owner signs up, proves the address, and is still on the list
    const owner = await signUp(t, { email: victim });
    await verifyEmail(t, victim);
    const status = await t.http.get(`/agents/${soon.id}/waitlist`, { cookie: owner.cookie });
    expect([status.status, status.body.data?.notified]).toEqual([200, true]);
    expect((await t.http.post(`/agents/${soon.id}/waitlist`, { json: { email: victim } })).status).toBe(200); // already on it
  });

  it("attack: removing an account that typed the owner's address first leaves the owner's entry", async () => {
    // joinWaitlist records the signed-in caller beside whatever address is typed, and the first row of an address is
    // the one kept: the removal erased every entry the account had made, so an account that put someone's address on
    // the list before them took that person's entry with it when an admin removed it (review 19).
    const soon = await createAgent(t, admin, { status: 'coming_soon' });
    const owner = await signUp(t, { verified: true });
    const squatter = await signUp(t);
    expect((await t.http.post(`/agents/${soon.id}/waitlist`, { cookie: squatter.cookie, json: { email: owner.email } })).status).toBe(201);
    expect((await t.http.post(`/agents/${soon.id}/waitlist`, { cookie: owner.cookie, json: { email: owner.email } })).status).toBe(200);
    const status = () => t.http.get(`/agents/${soon.id}/waitlist`, { cookie: owner.cookie });
    expect((await status()).body.data).toEqual({ notified: true });

    expect((await removeUser(squatter.userId)).status).toBe(200);

    expect((await status()).body.data).toEqual({ notified: true });
    expect((await t.http.post(`/agents/${soon.id}/waitlist`, { json: { email: owner.email } })).status).toBe(200); // still on it
    expect(await rows(t.db, sql`select 1 from waitlist_entries where user_id = ${squatter.userId}`)).toEqual([]);
    // the owner's own removal, of an address they proved, takes the entry
    expect((await removeUser(owner.userId)).status).toBe(200);
    expect(await rows(t.db, sql`select 1 from waitlist_entries where agent_id = ${soon.id}`)).toEqual([]);
  });

  it("a removal the library refuses leaves the user's reviews and installs as they were", async () => {
    const agent = await createAgent(t, admin);
    const user = await signUp(t);
    expect((await t.http.put(`/agents/${agent.id}/reviews`, { cookie: user.cookie, json: { rating: 4 } })).status).toBe(201);
    const refused = await t.http.post('/api/auth/admin/remove-user', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { userId: user.userId } });
    expect(refused.status).toBeGreaterThanOrEqual(400);
    expect((await t.http.get(`/agents/${agent.id}`)).body.data).toMatchObject({ reviewCount: 1, averageRating: 4 });
  });
});
