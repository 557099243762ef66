import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';
import { accessTokenFor, authorizeUrl, createOAuthClient, followAuthorize, pkcePair } from '../support/oauth.ts';
import { signIn, signUp } from '../support/users.ts';

/**
 * ADMIN_EMAIL names an account at start (functions/auth/ensure-admin.ts): an existing account with that address is made
 * the platform admin, its password replaced with ADMIN_PASSWORD and its address marked verified. The account may have
 * been made by someone else (sign-up needs no verified address): whoever signed up with the address before the
 * operator named it. The password write ended that person's sessions and tokens, but not what they set up from the
 * account: their consent to their own agent stayed, so once the admin signed in, the agent's page sent the admin's
 * browser through authorize with `prompt=none` and got a code for the platform admin's account without a consent
 * screen. Now the start takes the account back as a password reset does (public.mailbox_takes_account_back; found by
 * review 48).
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

describe('an ADMIN_EMAIL account someone else signed up first', () => {
  it("attack: the pre-registrant's consent to their agent does not outlive the start that makes the account the admin", async () => {
    const adminEmail = `ops-${Date.now()}@market.example`;
    let t: TestApp = await startTestApp({ testDatabase: db });
    let hostileAgent;
    try {
      hostileAgent = await createOAuthClient(t, { name: 'Hostile agent' });
      // The attacker signs up with the address the operator will name (never verified) and consents to their agent.
      const attacker = await signUp(t, { email: adminEmail, password: 'attacker chose this' });
      await accessTokenFor(t, attacker, { client: hostileAgent });
    } finally {
      await t.close();
    }
    // The operator names the address as the admin and restarts.
    t = await startTestApp({ testDatabase: db, env: { ADMIN_EMAIL: adminEmail, ADMIN_PASSWORD: 'the operator chose this' } });
    try {
      const admin = await signIn(t, { email: adminEmail, password: 'the operator chose this' });
      expect((await t.http.get('/me', { cookie: admin.cookie })).body.data.role).toBe('platform_admin');
      // The hostile agent's page sends the admin's browser through authorize with prompt=none.
      const { challenge } = pkcePair();
      const landing = await followAuthorize(t, `${authorizeUrl(hostileAgent, { challenge })}&prompt=none`, admin.cookie);
      expect(landing.searchParams.get('code'), `a code for the platform admin's account without their consent: ${landing.href}`).toBeNull();
      expect(landing.searchParams.get('error')).toBe('consent_required');
    } finally {
      await t.close();
    }
  });
});
