import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, verifyEmail, type TestUser } from '../support/users.ts';
import { createAgent } from './helpers.ts';

/**
 * Found by a review (03). Migration 20261127000200 erases, on a user's removal, every waitlist entry "for their address"
 * (`email = lower(old.email)`), whoever made it. Sign-up does not need a verified address (revision 2: an
 * unverified email proves nothing), so an account squatting someone's address, once removed by an admin (the
 * usual end of an abusive account), takes that person's own waitlist entries with it.
 */

let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

describe('removing an account that never proved its address', () => {
  it("attack: does not erase the waitlist entries the address's real owner made", async () => {
    const soon = await createAgent(t, admin, { status: 'coming_soon' });
    const victim = `owner-${randomUUID().slice(0, 8)}@example.test`;
    // The owner of the address joins, signed out, as the contract allows.
    const joined = await t.http.post(`/agents/${soon.id}/waitlist`, { json: { email: victim } });
    expect(joined.status, joined.text).toBe(201);

    // A stranger signs up with that address (never verified), behaves badly, and an admin removes the account.
    const squatter = await signUp(t, { email: victim });
    const removed = await t.http.post('/api/auth/admin/remove-user', {
      cookie: admin.cookie,
      headers: { origin: t.baseUrl },
      json: { userId: squatter.userId },
    });
    expect(removed.status, removed.text).toBe(200);

    // The real owner signs up, proves the address, and asks whether they are still on the list.
    const owner = await signUp(t, { email: victim });
    await verifyEmail(t, victim);
    const status = await t.http.get(`/agents/${soon.id}/waitlist`, { cookie: owner.cookie });
    expect(status.status, status.text).toBe(200);
    expect(status.body.data).toMatchObject({ notified: true }); // was: the squatter's removal erased it
    // and joining again is a new entry (201), not "already on it" (200)
    const again = await t.http.post(`/agents/${soon.id}/waitlist`, { json: { email: victim } });
    expect(again.status).toBe(200);
  });
});
