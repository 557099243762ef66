import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { authorizeInBrowser, createOAuthClient, pkcePair, postForm, type TestOAuthClient } from '../support/oauth.ts';
import { signUp } from '../support/users.ts';

/**
 * Found by a review (03) of 49d8d8f (clientRefused in functions/auth/oauth/protocol-gaps.ts). The probe asks only whether the caller
 * authenticates as *some* client, not as the client the code was issued to. Every agent seller holds a valid client
 * secret of their own, so the two attacks the commit closed for "anyone who saw a code" stay open to any hostile
 * agent backend: the library consumes the code (checkVerificationValue) before it compares its client_id, and the
 * wrapper's reuse branch (`else if (codeId)`: redeemedCode -> endRefreshTokenFamily + revokeAccessTokensOfGrant) ends
 * the grant without asking who replayed it.
 */
let t: TestApp;
let victimAgent: TestOAuthClient;
let hostileAgent: TestOAuthClient;
beforeAll(async () => {
  t = await startTestApp();
  victimAgent = await createOAuthClient(t, { name: 'Victim Agent' });
  hostileAgent = await createOAuthClient(t, { name: 'Hostile Agent' });
});
afterAll(() => t.close());

async function codeFor(client: TestOAuthClient) {
  const user = await signUp(t);
  const { verifier, challenge } = pkcePair();
  const { code } = await authorizeInBrowser(t, user, client, { challenge });
  return { code, verifier };
}
const exchange = (as: TestOAuthClient, code: string, verifier: string, redirectUri: string) =>
  postForm(t, '/api/auth/oauth2/token', as, { grant_type: 'authorization_code', code, redirect_uri: redirectUri, code_verifier: verifier });

describe("another agent's code in a hostile agent backend's hands (its own valid secret)", () => {
  it("attack: exchanging it with the hostile agent's credentials leaves the code to its agent", async () => {
    const { code, verifier } = await codeFor(victimAgent);
    const stolen = await exchange(hostileAgent, code, verifier, victimAgent.redirectUri);
    expect(stolen.status).toBe(400); // refused either way: invalid_grant "invalid client_id"
    const real = await exchange(victimAgent, code, verifier, victimAgent.redirectUri);
    expect(real.status, real.text).toBe(200); // was: 400 invalid_grant "invalid code", the sign-in is broken
  });

  it("attack: replaying a used code with the hostile agent's credentials does not end the victim agent's grant", async () => {
    const { code, verifier } = await codeFor(victimAgent);
    const real = await exchange(victimAgent, code, verifier, victimAgent.redirectUri);
    expect(real.status, real.text).toBe(200);
    const replay = await exchange(hostileAgent, code, verifier, victimAgent.redirectUri);
    expect(replay.status).toBe(400);
    expect((await t.http.get('/me', { bearer: real.body.access_token })).status).toBe(200); // was: 401, revoked
    const refreshed = await postForm(t, '/api/auth/oauth2/token', victimAgent, { grant_type: 'refresh_token', refresh_token: real.body.refresh_token });
    expect(refreshed.status, refreshed.text).toBe(200);
  });

  it("attack: the same replay after the access token's record is pruned (10 hours) does not end the grant either", async () => {
    // The used code's client was read from the access tokens' record only, pruned once they expire: after that the
    // replay went on to the library, which revoked the grant's refresh tokens (found by a review).
    const { code, verifier } = await codeFor(victimAgent);
    const real = await exchange(victimAgent, code, verifier, victimAgent.redirectUri);
    expect(real.status, real.text).toBe(200);
    t.clock.advance(11 * 60 * 60_000);
    // any token issued afterwards prunes the expired access-token records
    const other = await codeFor(hostileAgent);
    expect((await exchange(hostileAgent, other.code, other.verifier, hostileAgent.redirectUri)).status).toBe(200);
    expect((await exchange(hostileAgent, code, verifier, victimAgent.redirectUri)).status).toBe(400);
    const refreshed = await postForm(t, '/api/auth/oauth2/token', victimAgent, { grant_type: 'refresh_token', refresh_token: real.body.refresh_token });
    expect(refreshed.status, refreshed.text).toBe(200); // was: 400 invalid_grant, the library deleted the refresh token
  });

  it("the code's own client presenting it again after 10 hours still ends the grant (RFC 6749 §4.1.2: a stolen copy)", async () => {
    const { code, verifier } = await codeFor(victimAgent);
    const real = await exchange(victimAgent, code, verifier, victimAgent.redirectUri);
    expect(real.status, real.text).toBe(200);
    t.clock.advance(11 * 60 * 60_000);
    const other = await codeFor(hostileAgent);
    expect((await exchange(hostileAgent, other.code, other.verifier, hostileAgent.redirectUri)).status).toBe(200); // prunes
    // its access tokens' record is gone; the grant's refresh token still says whose the code is
    expect((await exchange(victimAgent, code, verifier, victimAgent.redirectUri)).status).toBe(400);
    const after = await postForm(t, '/api/auth/oauth2/token', victimAgent, { grant_type: 'refresh_token', refresh_token: real.body.refresh_token });
    expect([after.status, after.body.error]).toEqual([400, 'invalid_grant']);
  });
});
