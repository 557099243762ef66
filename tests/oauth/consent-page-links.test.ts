import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { authorizeUrl, createOAuthClient, followAuthorize, pkcePair } from '../support/oauth.ts';
import { signUp } from '../support/users.ts';

/**
 * The built-in consent page (functions/auth/oauth/pages.ts) is where a user decides to hand an
 * agent their account, so what it says must come from the service, not from whoever wrote the link. The library
 * checks the consent code's signature only when the consent is posted; the page rendered whatever a link carried.
 */

/** A consent code in the shape of ours (base64url of a query with client_id and sig), signed by nobody. */
const forgedCode = (query: string) => Buffer.from(query).toString('base64url');

describe('the consent page', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t?.close());

  it("attack: a stranger's link does not put their words on our consent page as the application's name", async () => {
    const words = 'Your account is locked. Call 0800 555 0100 to unlock it';
    const page = await t.http.get(`/consent?consent_code=${forgedCode(`client_id=${encodeURIComponent(words)}&scope=openid&sig=x`)}`);
    expect(page.text).not.toContain(words);
    expect(page.status).toBe(400);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
  });

  it("attack: a link naming a real agent does not list the stranger's words as what the agent may do", async () => {
    const agent = await createOAuthClient(t, { name: 'Honest Agent' });
    const scope = `openid ${['Send', 'your', 'password', 'to', 'help@evil.example'].join(' ')}`;
    const page = await t.http.get(`/consent?consent_code=${forgedCode(new URLSearchParams({ client_id: agent.clientId, scope, sig: 'x' }).toString())}`);
    expect(page.text).not.toContain('help@evil.example');
    expect(page.status).toBe(400);
  });

  it("attack: a link naming a real agent with the admin scope, which only the first-party client may be granted, is refused", async () => {
    const agent = await createOAuthClient(t, { name: 'Honest Agent' });
    // authorize refuses the same request: the agent's client may not ask for admin
    const user = await signUp(t);
    const refused = await followAuthorize(t, authorizeUrl(agent, { challenge: pkcePair().challenge, scope: 'openid admin' }), user.cookie);
    expect(refused.pathname).not.toBe('/consent');
    const page = await t.http.get(`/consent?consent_code=${forgedCode(new URLSearchParams({ client_id: agent.clientId, scope: 'openid admin', sig: 'x' }).toString())}`);
    expect(page.status).toBe(400);
    expect(page.text).not.toContain('Honest Agent');
  });

  it('the consent the library sends a signed-in user to still shows the agent and every scope asked', async () => {
    const agent = await createOAuthClient(t, { name: 'Listed Agent' });
    const user = await signUp(t);
    const { challenge } = pkcePair();
    const landing = await followAuthorize(t, authorizeUrl(agent, { challenge }), user.cookie);
    expect(landing.pathname).toBe('/consent');
    const page = await t.http.get(landing.pathname + landing.search);
    expect(page.status).toBe(200);
    expect(page.text).toContain('<strong id="client-name">Listed Agent</strong>');
    for (const text of ['Know who you are', 'See your name and picture', 'See your email address', 'Keep access while you are away']) {
      expect(page.text).toContain(text);
    }
    // a scope outside the grantable ones never reaches the consent page: authorize refuses it first
    const refused = await followAuthorize(t, authorizeUrl(agent, { challenge, scope: 'openid help@evil.example' }), user.cookie);
    expect(refused.pathname).not.toBe('/consent');
    expect(refused.searchParams.get('error')).toBe('invalid_scope');
  });
});
