import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, authorizeInBrowser, createOAuthClient, pkcePair, postForm, type TestOAuthClient } from '../support/oauth.ts';
import { signUp } from '../support/users.ts';

/**
 * The token endpoint authenticates the client before it looks at the code or the refresh token (found by a walk
 * through docs/errors.md): the library consumed the code first, so anyone who saw a code (a browser history, a log, a
 * Referer) could use it up with a wrong secret and break that sign-in, replay a used one to end the grant's tokens,
 * and tell a live refresh token from a dead one without the secret.
 */

let t: TestApp;
let agent: TestOAuthClient;
beforeAll(async () => {
  t = await startTestApp();
  agent = await createOAuthClient(t, { name: 'Careful Agent' });
});
afterAll(() => t.close());

const withoutSecret = () => ({ clientId: agent.clientId, clientSecret: 'not-the-secret' });

async function freshCode() {
  const user = await signUp(t);
  const { verifier, challenge } = pkcePair();
  const { code } = await authorizeInBrowser(t, user, agent, { challenge });
  return { user, code, verifier };
}
const exchange = (client: { clientId: string; clientSecret: string } | null, code: string, verifier: string, extra: Record<string, string> = {}) =>
  postForm(t, '/api/auth/oauth2/token', client, { grant_type: 'authorization_code', code, redirect_uri: agent.redirectUri, code_verifier: verifier, ...extra });

describe('a code in the hands of someone without the client secret', () => {
  it('attack: exchanging it with a wrong secret, or with none, is 401 invalid_client and leaves the code to the agent', async () => {
    const { code, verifier } = await freshCode();
    const wrong = await exchange(withoutSecret(), code, verifier);
    expect([wrong.status, wrong.body.error]).toEqual([401, 'invalid_client']);
    // PKCE alone, the client id in the form and no secret: this client is confidential
    const bare = await exchange(null, code, verifier, { client_id: agent.clientId });
    expect([bare.status, bare.body.error]).toEqual([401, 'invalid_client']);
    const unknown = await exchange({ clientId: 'no-such-client', clientSecret: 'x' }, code, verifier);
    expect([unknown.status, unknown.body.error]).toEqual([401, 'invalid_client']);
    // the agent's own exchange still works: the code was not used up (it was: invalid_grant "invalid code")
    const real = await exchange(agent, code, verifier);
    expect(real.status, real.text).toBe(200);
    expect(typeof real.body.access_token).toBe('string');
  });

  it("attack: replaying a used code without the secret does not end the user's tokens", async () => {
    const { code, verifier } = await freshCode();
    const real = await exchange(agent, code, verifier);
    expect(real.status).toBe(200);
    const replay = await exchange(withoutSecret(), code, verifier);
    expect([replay.status, replay.body.error]).toEqual([401, 'invalid_client']);
    expect((await t.http.get('/me', { bearer: real.body.access_token })).status).toBe(200);
    const refreshed = await postForm(t, '/api/auth/oauth2/token', agent, { grant_type: 'refresh_token', refresh_token: real.body.refresh_token });
    expect(refreshed.status, refreshed.text).toBe(200);
    // the agent's own replay (a stolen code used twice with the secret) still ends the grant (RFC 6749 §4.1.2)
    const ownReplay = await exchange(agent, code, verifier);
    expect([ownReplay.status, ownReplay.body.error]).toEqual([400, 'invalid_grant']);
    expect((await t.http.get('/me', { bearer: refreshed.body.access_token })).status).toBe(401);
  });
});

describe('a refresh token in the hands of someone without the client secret', () => {
  it('attack: a live and a dead refresh token answer the same 401 invalid_client', async () => {
    const user = await signUp(t);
    const live = await accessTokenFor(t, user, { client: agent });
    const dead = await accessTokenFor(t, user, { client: agent });
    expect((await postForm(t, '/api/auth/oauth2/revoke', agent, { token: dead.refreshToken, token_type_hint: 'refresh_token' })).status).toBe(200);
    const answers = [];
    for (const token of [live.refreshToken, dead.refreshToken, 'no-such-token']) {
      const res = await postForm(t, '/api/auth/oauth2/token', withoutSecret(), { grant_type: 'refresh_token', refresh_token: token });
      answers.push([res.status, res.body.error]);
    }
    expect(answers).toEqual([
      [401, 'invalid_client'],
      [401, 'invalid_client'],
      [401, 'invalid_client'],
    ]);
    const ok = await postForm(t, '/api/auth/oauth2/token', agent, { grant_type: 'refresh_token', refresh_token: live.refreshToken });
    expect(ok.status, ok.text).toBe(200);
  });
});

describe('PKCE mistakes of an authenticated client', () => {
  it('a code_verifier that does not match is 400 invalid_grant (RFC 7636 §4.6), not 401', async () => {
    const { code } = await freshCode();
    const res = await exchange(agent, code, pkcePair().verifier);
    expect([res.status, res.body.error]).toEqual([400, 'invalid_grant']);
    expect(res.headers.get('cache-control')).toBe('no-store');
  });
});
