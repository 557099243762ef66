import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import {
  accessTokenFor,
  authorizeUrl,
  createOAuthClient,
  followAuthorize,
  pkcePair,
  postForm,
  type TestOAuthClient,
  type TokenSet,
} from '../support/oauth.ts';
import { signIn, signUp, type TestUser } from '../support/users.ts';

/**
 * The mailbox's owner taking an account back takes back the agents its previous holder consented to (review 05,
 * finding 1; migration 20261127000700, public.mailbox_takes_account_back). Anyone may sign up with someone else's
 * address (unverified) and consent to an agent; the owner takes the account over with "forgot password", which
 * verified the address and ended every session and token, but left the consent: once the owner signed in, the agent's
 * page sent their browser through authorize with `prompt=none` and got a code for the owner's account, no consent
 * screen, offline_access and the owner's email included. Every reset ends the consents (a thief holding a verified
 * account may have consented too); a password change keeps them. The purchase-claim path is in
 * tests/billing/anonymous-checkout.test.ts ("a claim ends the consents the unverified holder gave"). The same holds
 * for the organization invitations the holder sent from the account (review 10; migration 20261127001600).
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

/** "Forgot password" through the mailed link, as the mailbox's owner does it; returns their new session. */
async function resetThroughTheMailbox(email: string, newPassword: string): Promise<TestUser> {
  const asked = await t.http.post('/api/auth/request-password-reset', { json: { email, redirectTo: `${t.baseUrl}/reset-password` } });
  expect(asked.status).toBe(200);
  const resetLink = linkIn((await mailsTo(t, email)).filter((m) => /reset/i.test(m.subject)).pop()!);
  const opened = await t.http.get(resetLink.pathname + resetLink.search);
  const token = new URL(opened.headers.get('location')!).searchParams.get('token')!;
  const reset = await t.http.post('/api/auth/reset-password', { json: { newPassword, token } });
  expect(reset.status, reset.text).toBe(200);
  return signIn(t, { email, password: newPassword });
}

/**
 * The agent's page navigates the user's browser to authorize with `prompt=none`: where it lands, and what the code
 * (if any) is worth at the token endpoint and at GET /me.
 */
async function silentAuthorization(agent: TestOAuthClient, user: TestUser) {
  const { verifier, challenge } = pkcePair();
  const landing = await followAuthorize(t, `${authorizeUrl(agent, { challenge })}&prompt=none`, user.cookie);
  const code = landing.searchParams.get('code');
  if (!code) return { landing, code, me: undefined };
  const token = await postForm(t, '/api/auth/oauth2/token', agent, {
    grant_type: 'authorization_code',
    code,
    redirect_uri: agent.redirectUri,
    code_verifier: verifier,
  });
  expect(token.status, token.text).toBe(200);
  const me = await t.http.get('/me', { bearer: token.body.access_token });
  return { landing, code, me: me.body.data as { id: string; email?: string } };
}

async function expectEnded(tokens: TokenSet) {
  expect((await t.http.get('/me', { bearer: tokens.accessToken })).status).toBe(401);
  const refresh = await postForm(t, '/api/auth/oauth2/token', tokens, { grant_type: 'refresh_token', refresh_token: tokens.refreshToken });
  expect(refresh.body.error).toBe('invalid_grant');
}

describe('consents of an account taken back by its mailbox', () => {
  it('control: a user who consented and kept their account gets a silent code (prompt=none) for themselves', async () => {
    const agent = await createOAuthClient(t, { name: 'An agent the user uses' });
    const user = await signUp(t, { verified: true });
    await accessTokenFor(t, user, { client: agent });
    const { landing, code, me } = await silentAuthorization(agent, user);
    expect(code, landing.href).toBeTruthy();
    expect(me).toMatchObject({ id: user.userId, email: user.email });
  });

  it("attack: the pre-registrant's consent to their agent ends with the owner's reset: no silent code for the owner's account", async () => {
    const hostileAgent = await createOAuthClient(t, { name: 'Hostile agent' });
    const victimEmail = `victim-${Date.now()}@example.test`;
    // The attacker signs up with the victim's address (never verified) and consents to their own agent, all scopes.
    const attacker = await signUp(t, { email: victimEmail, password: 'attacker chose this' });
    const attackersTokens = await accessTokenFor(t, attacker, { client: hostileAgent });

    // The address's owner takes the account over with "forgot password".
    const owner = await resetThroughTheMailbox(victimEmail, 'the owner chose this');
    expect(owner.userId).toBe(attacker.userId);
    expect((await t.http.get('/api/auth/get-session', { cookie: owner.cookie })).body.user.emailVerified).toBe(true);
    await expectEnded(attackersTokens);

    // The hostile agent's page sends the owner's browser through authorize with prompt=none: the owner never consented.
    const silent = await silentAuthorization(hostileAgent, owner);
    expect(silent.code, `a code for the owner's account without the owner's consent: ${JSON.stringify(silent.me)}`).toBeNull();
    expect(silent.landing.searchParams.get('error')).toBe('consent_required');
    // Asked plainly, the agent gets the consent screen: the owner decides.
    const asked = await followAuthorize(t, authorizeUrl(hostileAgent, { challenge: pkcePair().challenge }), owner.cookie);
    expect(asked.pathname).toBe('/consent');
    expect(asked.searchParams.get('code')).toBeNull();
  });

  it('a reset of a verified account ends its consents too (a thief may have consented from a stolen session)', async () => {
    const agent = await createOAuthClient(t, { name: 'An agent the thief chose' });
    const user = await signUp(t, { verified: true });
    // The thief, signed in as the user (a stolen session or password), consents to an agent.
    const thiefsTokens = await accessTokenFor(t, user, { client: agent });

    const owner = await resetThroughTheMailbox(user.email, 'the owner took it back');
    await expectEnded(thiefsTokens);
    const silent = await silentAuthorization(agent, owner);
    expect(silent.code, silent.landing.href).toBeNull();
    expect(silent.landing.searchParams.get('error')).toBe('consent_required');
    // Consenting again works as the first time did, and its tokens are the owner's.
    const again = await accessTokenFor(t, owner, { client: agent });
    expect((await t.http.get('/me', { bearer: again.accessToken })).body.data.id).toBe(user.userId);
  });

  it('a password change (the current password known) keeps the consents: the agent signs the user in silently again', async () => {
    const agent = await createOAuthClient(t, { name: 'An agent kept across a change' });
    const user = await signUp(t, { verified: true });
    const before = await accessTokenFor(t, user, { client: agent });
    const change = await t.http.post('/api/auth/change-password', {
      cookie: user.cookie,
      headers: { origin: t.baseUrl },
      json: { currentPassword: user.password, newPassword: 'changed, not reset' },
    });
    expect(change.status, change.text).toBe(200);
    await expectEnded(before);
    const again = await signIn(t, { email: user.email, password: 'changed, not reset' });
    const silent = await silentAuthorization(agent, again);
    expect(silent.code, silent.landing.href).toBeTruthy();
    expect(silent.me?.id).toBe(user.userId);
  });
});

describe('invitations of an account taken back by its mailbox', () => {
  // Was (review 10): the thief, with the owner's session, invited an account of their own as owner; after the owner's
  // reset that account accepted and removed the owner from their own organization.
  it("attack: an invitation a thief sent from the owner's session is canceled by the owner's reset", async () => {
    const owner = await signUp(t, { verified: true, name: 'Real owner' });
    const withOrigin = (u: TestUser) => ({ cookie: u.cookie, headers: { origin: t.baseUrl } });
    const org = await t.http.post('/api/auth/organization/create', { ...withOrigin(owner), json: { name: 'Owner Co', slug: `own-${randomUUID().slice(0, 8)}` } });
    expect(org.status, org.text).toBe(200);
    const thief = await signUp(t, { verified: true, name: 'Thief' });
    const invitation = await t.http.post('/api/auth/organization/invite-member', {
      ...withOrigin(owner),
      json: { email: thief.email, role: 'owner', organizationId: org.body.id },
    });
    expect(invitation.status, invitation.text).toBe(200);

    await resetThroughTheMailbox(owner.email, `New-${randomUUID()}`);

    const accepted = await t.http.post('/api/auth/organization/accept-invitation', { ...withOrigin(thief), json: { invitationId: invitation.body.id } });
    expect(accepted.status, accepted.text).toBe(400);
    expect(await rows(t.db, sql`select role from member where "organizationId" = ${org.body.id} and "userId" = ${thief.userId}`)).toEqual([]);
    expect(await rows(t.db, sql`select status from invitation where id = ${invitation.body.id}`)).toEqual([{ status: 'canceled' }]);
  });
});
