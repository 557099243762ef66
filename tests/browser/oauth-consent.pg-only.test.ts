import { createServer, type Server } from 'node:http';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { AddressInfo } from 'node:net';
import { startTestApp, type TestApp } from '../support/app.ts';
import { launchChromiumProfile, screenshot } from '../support/browser.ts';
import { authorizeUrl, createOAuthClient, pkcePair, postForm, type TestOAuthClient } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * The OAuth flow once in a real browser: headless Debian Chromium, driven by playwright-core, opens an agent's
 * authorize URL signed out, is sent to the built-in sign-in page, signs in, sees the built-in consent page,
 * clicks Allow, and lands on the agent's redirect_uri with a code and the state; the code then buys tokens.
 * A screenshot of each page is saved under .test-artifacts/.
 */

let t: TestApp;
let browser: BrowserContext;
let closeBrowser: (() => Promise<void>) | undefined;
let agentServer: Server;
let callback: string;
let agent: TestOAuthClient;
let user: TestUser;

beforeAll(async () => {
  t = await startTestApp();
  // The agent backend's callback: a page that just says where the browser arrived.
  agentServer = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(`<!doctype html><title>Agent</title><h1>Back at the agent</h1><p>${req.url?.replace(/[<>&"]/g, '')}</p>`);
  });
  await new Promise<void>((resolve) => agentServer.listen(0, '127.0.0.1', resolve));
  callback = `http://127.0.0.1:${(agentServer.address() as AddressInfo).port}/oauth/callback`;
  agent = await createOAuthClient(t, { name: 'Browser Agent', redirectUris: [callback] });
  user = await signUp(t);
  // A fresh profile directory per run.
  ({ context: browser, close: closeBrowser } = await launchChromiumProfile());
});

/** A new tab with no session: each test signs in as someone. */
async function freshPage(): Promise<Page> {
  await browser.clearCookies();
  return browser.newPage();
}

afterAll(async () => {
  await closeBrowser?.();
  await new Promise<void>((resolve) => (agentServer ? agentServer.close(() => resolve()) : resolve()));
  await t?.close();
});

test('sign in and consent through the built-in pages, landing on the redirect_uri with code and state', async () => {
  const page = await freshPage();
  const { verifier, challenge } = pkcePair();
  const state = 'browser-state-42';
  await page.goto(`${t.baseUrl}${authorizeUrl(agent, { challenge, state })}`);

  await page.waitForURL((url) => url.pathname === '/sign-in');
  await screenshot(page, 'oauth-1-sign-in.png');
  await page.fill('#email', user.email);
  await page.fill('#password', user.password);
  await page.click('#submit');

  await page.waitForURL((url) => url.pathname === '/consent');
  expect(await page.textContent('#client-name')).toBe('Browser Agent');
  expect(await page.textContent('#scopes')).toContain('See your email address');
  await screenshot(page, 'oauth-2-consent.png');
  await page.click('#allow');

  await page.waitForURL((url) => url.href.startsWith(callback));
  await screenshot(page, 'oauth-3-back-at-agent.png');
  const landed = new URL(page.url());
  expect(landed.searchParams.get('state')).toBe(state);
  const code = landed.searchParams.get('code');
  expect(code).toBeTruthy();
  expect(landed.searchParams.get('iss')).toBe(`${t.baseUrl}/api/auth`);

  const tokens = await postForm(t, '/api/auth/oauth2/token', agent, {
    grant_type: 'authorization_code',
    code: code!,
    redirect_uri: callback,
    code_verifier: verifier,
  });
  expect(tokens.status).toBe(200);
  const me = await t.http.get('/me', { bearer: tokens.body.access_token });
  expect(me.status).toBe(200);
  expect(me.body.data.email).toBe(user.email);
});

test('denying on the consent page sends the browser back with error=access_denied', async () => {
  const page = await freshPage();
  const other = await signUp(t);
  const { challenge } = pkcePair();
  await page.goto(`${t.baseUrl}${authorizeUrl(agent, { challenge, state: 'deny' })}`);
  await page.waitForURL((url) => url.pathname === '/sign-in');
  await page.fill('#email', other.email);
  await page.fill('#password', other.password);
  await page.click('#submit');
  await page.waitForURL((url) => url.pathname === '/consent');
  await page.click('#deny');
  await page.waitForURL((url) => url.href.startsWith(callback));
  const landed = new URL(page.url());
  expect(landed.searchParams.get('error')).toBe('access_denied');
  expect(landed.searchParams.get('state')).toBe('deny');
  expect(landed.searchParams.get('code')).toBeNull();
});

test('a wrong password shows an error and stays on the sign-in page', async () => {
  const page = await freshPage();
  const { challenge } = pkcePair();
  await page.goto(`${t.baseUrl}${authorizeUrl(agent, { challenge })}`);
  await page.waitForURL((url) => url.pathname === '/sign-in');
  await page.fill('#email', user.email);
  await page.fill('#password', 'not-the-password');
  await page.click('#submit');
  // the page shows what the sign-in endpoint says for these credentials: the wrong password, not another failure
  const api = await t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password: 'not-the-password' }, headers: { origin: t.baseUrl } });
  expect(api.status).toBe(401);
  expect(api.body.message).toMatch(/invalid email or password/i);
  await expect.poll(() => page.textContent('#status')).toBe(api.body.message);
  expect(new URL(page.url()).pathname).toBe('/sign-in');
});

test('a new user creates an account from the sign-in page and the flow continues to consent', async () => {
  const page = await freshPage();
  const { challenge } = pkcePair();
  await page.goto(`${t.baseUrl}${authorizeUrl(agent, { challenge, state: 'new-user' })}`);
  await page.waitForURL((url) => url.pathname === '/sign-in');
  await page.click('text=Create one');
  await page.waitForURL((url) => url.pathname === '/sign-up');
  await page.fill('#name', 'Grace');
  await page.fill('#email', `grace-${Date.now()}@example.test`);
  await page.fill('#password', 'a-long-enough-password');
  await page.click('#submit');
  await page.waitForURL((url) => url.pathname === '/consent');
  await page.click('#allow');
  await page.waitForURL((url) => url.href.startsWith(callback));
  const landed = new URL(page.url());
  expect(landed.searchParams.get('state')).toBe('new-user');
  expect(landed.searchParams.get('code')).toBeTruthy();
});
