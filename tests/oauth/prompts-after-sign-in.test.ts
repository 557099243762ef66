import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, authorizeUrl, createOAuthClient, followAuthorize, pkcePair, type TestOAuthClient } from '../support/oauth.ts';
import { signIn, signUp } from '../support/users.ts';

/**
 * The prompt values an agent may send, as the built-in pages serve them (review 69). contract.md: "After sign-in, the
 * same authorize URL issued again with the new session continues the flow (consent or code)". With `prompt=login` (an
 * agent asking the user to sign in afresh before a sensitive action), `max_age=0` or `prompt=create`, the URL the
 * sign-in page requested again still carried them, and the library sent the new session back to the sign-in (or
 * sign-up) page, for ever. Done here step by step as the page does it: read its continue URL, sign in with
 * POST /api/auth/sign-in/email as its script does, then open the continue URL with the new session. And discovery
 * offered `prompt=select_account`, which stranded the user on the marketplace's error page.
 */
let t: TestApp;
let agent: TestOAuthClient;
beforeAll(async () => {
  t = await startTestApp();
  agent = await createOAuthClient(t, { name: 'Step-up Agent' });
});
afterAll(() => t.close());

async function signInThroughBuiltInPage(extra: Record<string, string>) {
  const user = await signUp(t);
  await accessTokenFor(t, user, { client: agent }); // consented once already: the flow needs no consent screen
  const { challenge } = pkcePair();
  const url = new URL(authorizeUrl(agent, { challenge }), t.baseUrl);
  for (const [k, v] of Object.entries(extra)) url.searchParams.set(k, v);
  const first = await followAuthorize(t, `${url.pathname}${url.search}`, user.cookie);
  expect(['/sign-in', '/sign-up']).toContain(first.pathname);
  // the built-in page (GET /sign-in?... or /sign-up?...): where its script goes once signed in
  const page = await t.http.get(`/sign-in${first.search}`);
  expect(page.status).toBe(200);
  const continueUrl = /data-continue="([^"]*)"/.exec(page.text)![1]!.replace(/&amp;/g, '&');
  expect(continueUrl.startsWith('/api/auth/oauth2/authorize?')).toBe(true);
  const fresh = await signIn(t, { email: user.email, password: user.password }); // the page's fetch
  return followAuthorize(t, continueUrl, fresh.cookie); // location.assign(continueUrl)
}

describe('attack (review 69): a fresh sign-in asked for with prompt=login, max_age=0 or prompt=create continues to the agent', () => {
  // 'login\t': the library trims each value it reads, and so must what judges them before it
  for (const extra of [{ prompt: 'login' }, { max_age: '0' }, { prompt: 'create' }, { prompt: 'login\t' }] as Array<Record<string, string>>) {
    it(`${JSON.stringify(extra)}: after signing in on the sign-in page the browser lands at the redirect_uri with a code`, async () => {
      const landing = await signInThroughBuiltInPage(extra);
      expect(`${landing.origin}${landing.pathname}`).toBe(agent.redirectUri); // observed: /sign-in (or /sign-up) again, a loop
      expect(landing.searchParams.get('code')).toBeTruthy();
    });
  }
});

describe('what the sign-in did not satisfy stays', () => {
  it('prompt=login consent: after the sign-in the consent screen is shown again', async () => {
    const landing = await signInThroughBuiltInPage({ prompt: 'login consent' });
    expect(landing.pathname).toBe('/consent');
  });
});

describe('the prompt values discovery offers', () => {
  it('are each served: none strands the user on the marketplace error page (select_account is not offered)', async () => {
    const discovery = await t.http.get('/api/auth/.well-known/openid-configuration');
    const advertised: string[] = discovery.body.prompt_values_supported;
    expect(advertised).toEqual(expect.arrayContaining(['none', 'login', 'consent', 'create']));
    expect(advertised).not.toContain('select_account');
    const user = await signUp(t);
    await accessTokenFor(t, user, { client: agent });
    for (const prompt of advertised) {
      const { challenge } = pkcePair();
      const url = new URL(authorizeUrl(agent, { challenge }), t.baseUrl);
      url.searchParams.set('prompt', prompt);
      const landing = await followAuthorize(t, `${url.pathname}${url.search}`, user.cookie);
      expect({ prompt, page: landing.pathname }).not.toEqual({ prompt, page: '/api/auth/error' });
    }
  });

  it('prompt=select_account comes back to the redirect_uri as account_selection_required, with state and issuer', async () => {
    const user = await signUp(t);
    await accessTokenFor(t, user, { client: agent });
    for (const prompt of ['select_account', 'select_account\t']) {
      const { challenge } = pkcePair();
      const url = new URL(authorizeUrl(agent, { challenge, state: 'st-1' }), t.baseUrl);
      url.searchParams.set('prompt', prompt);
      const landing = await followAuthorize(t, `${url.pathname}${url.search}`, user.cookie);
      expect(`${landing.origin}${landing.pathname}`).toBe(agent.redirectUri);
      expect([landing.searchParams.get('error'), landing.searchParams.get('state'), landing.searchParams.get('code')]).toEqual(['account_selection_required', 'st-1', null]);
      expect(landing.searchParams.get('iss')).toBe(`${t.baseUrl}/api/auth`);
    }
  });
});
