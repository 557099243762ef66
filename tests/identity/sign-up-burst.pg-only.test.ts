import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { mailsTo } from '../support/mail.ts';

/**
 * A burst of sign-ups does not stop the service (found by a review's probe of hostile input). The library runs
 * sign-up whole in one transaction, holding a pooled connection; its mail hooks (the verification mail, the "someone
 * signed up with your address" mail) asked the pool for a second one. With as many sign-ups at once as the pool has
 * connections (10), each held one and waited for another: nothing touching the database was answered until
 * PostgreSQL's idle-in-transaction timeout ended them a minute later, and one address's sign-up limit allows a burst
 * every minute. The hooks now run after the library's commit. (PostgreSQL only: the embedded database runs the
 * library without transactions.)
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t?.close());

describe('a burst of sign-ups', () => {
  it('twelve at once, new and existing addresses, are all answered 200 and mailed, and the catalog answers meanwhile', async () => {
    const existing = `burst-existing-${randomUUID()}@example.test`;
    expect((await t.http.post('/api/auth/sign-up/email', { json: { email: existing, password: 'password-123456', name: 'First' } })).status).toBe(200);
    const addresses = [...Array.from({ length: 10 }, () => `burst-${randomUUID()}@example.test`), existing, existing];
    const signUps = addresses.map((email) => t.http.post('/api/auth/sign-up/email', { json: { email, password: 'password-123456', name: 'Burst' } }));
    const catalog = t.http.get('/agents');
    const answers = await Promise.all(signUps);
    expect(answers.map((a) => a.status)).toEqual(Array(12).fill(200));
    expect((await catalog).status).toBe(200);
    for (const email of addresses.slice(0, 10)) expect((await mailsTo(t, email)).map((m) => m.subject)).toHaveLength(1);
    expect(await mailsTo(t, existing)).toHaveLength(2); // its own verification mail, then one notice (at most 1 an hour: rule 10)
  }, 120_000);
});
