import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, authorizeInBrowser, createOAuthClient, pkcePair, postForm, type TestOAuthClient } from '../support/oauth.ts';
import { signUp } from '../support/users.ts';

/**
 * Found by a review (03). The token wrapper (functions/auth/oauth/protocol-gaps.ts, POST /api/auth/oauth2/token) decides what the
 * request is by `form.get('grant_type') === 'authorization_code' | 'refresh_token'`, but the library's body schema is
 * `grant_type: z.string().trim().min(1)`: it trims. `grant_type=authorization_code ` (a trailing space, or a tab or
 * newline) skips everything the wrapper does for a grant (clientRefused, the audience, the code-exchange count, the
 * reuse handling, the refresh allowance) and the library still runs it as authorization_code / refresh_token.
 */
let t: TestApp;
let agent: TestOAuthClient;
beforeAll(async () => {
  t = await startTestApp();
  agent = await createOAuthClient(t, { name: 'Spelling Agent' });
});
afterAll(() => t.close());

describe('grant_type with whitespace around it', () => {
  it('attack: a code seen in a log, sent with a wrong secret and "authorization_code ", is not used up', async () => {
    const user = await signUp(t);
    const { verifier, challenge } = pkcePair();
    const { code } = await authorizeInBrowser(t, user, agent, { challenge });
    const form = { code, redirect_uri: agent.redirectUri, code_verifier: verifier };
    const wrong = await postForm(t, '/api/auth/oauth2/token', { clientId: agent.clientId, clientSecret: 'not-the-secret' }, {
      grant_type: 'authorization_code ',
      ...form,
    });
    expect([wrong.status, wrong.body.error]).toEqual([401, 'invalid_client']);
    const real = await postForm(t, '/api/auth/oauth2/token', agent, { grant_type: 'authorization_code', ...form });
    expect(real.status, real.text).toBe(200); // was: 400 invalid_grant "invalid code"
  });

  it('the client itself, with its secret and "authorization_code ", gets an OAuth answer, never a 500', async () => {
    const user = await signUp(t);
    const { verifier, challenge } = pkcePair();
    const { code } = await authorizeInBrowser(t, user, agent, { challenge });
    const res = await postForm(t, '/api/auth/oauth2/token', agent, {
      grant_type: 'authorization_code ',
      code,
      redirect_uri: agent.redirectUri,
      code_verifier: verifier,
    });
    // was: 500 INTERNAL, "the token endpoint minted an access token without jti, sub, client_id or exp"
    // (token-records.ts issuedAccessToken, called at protocol-gaps.ts:222): no resource was set, so the library minted
    // an opaque token, after it had consumed the code and written a refresh token.
    expect(res.status, res.text).toBeLessThan(500);
  });

  it('attack: "refresh_token\\t" does not get past the 60-an-hour refresh allowance', async () => {
    const user = await signUp(t);
    let { refreshToken } = await accessTokenFor(t, user, { client: agent });
    const statuses: number[] = [];
    for (let i = 0; i < 62; i++) {
      const res = await postForm(t, '/api/auth/oauth2/token', agent, { grant_type: 'refresh_token\t', refresh_token: refreshToken });
      statuses.push(res.status);
      if (res.status === 200) refreshToken = res.body.refresh_token;
    }
    expect(statuses.filter((s) => s === 429).length, `statuses: ${[...new Set(statuses)].join(',')}`).toBeGreaterThan(0);
  });
});
