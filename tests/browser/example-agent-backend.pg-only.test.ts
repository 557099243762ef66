import { serve, type ServerType } from '@hono/node-server';
import type { AddressInfo } from 'node:net';
import type { BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { agentBackend } from '../../examples/agent-backend/app.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { launchChromiumProfile, screenshot } from '../support/browser.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * examples/agent-backend (a Hono app on the SDK) driven end to end in headless Chromium: the agent is set up over
 * the admin API, a subscribed user clicks "Sign in with the marketplace", signs in and consents on the marketplace's
 * pages, lands back at the agent, and each "Summarize" meters one call until the quota's 429 page.
 */

let t: TestApp;
let backend: ServerType;
let backendUrl: string;
let browser: BrowserContext;
let closeBrowser: (() => Promise<void>) | undefined;
let user: TestUser;
let agentId: string;
let clientId: string;

beforeAll(async () => {
  t = await startTestApp();
  // The backend's port first: its /callback must be registered on the agent's client.
  let app: ReturnType<typeof agentBackend> | undefined;
  backend = serve({ fetch: (req) => app!.fetch(req), port: 0, hostname: '127.0.0.1' });
  await new Promise<void>((resolve) => backend.once('listening', () => resolve()));
  backendUrl = `http://127.0.0.1:${(backend.address() as AddressInfo).port}`;

  const admin = await createAdmin(t);
  const as = { cookie: admin.cookie };
  const agent = await t.http.post('/agents', {
    ...as,
    json: { slug: `summarizer-${Date.now()}`, name: 'Summarizer', description: 'Summaries', status: 'active', redirectUris: [`${backendUrl}/callback`] },
  });
  expect(agent.status, agent.text).toBe(201);
  agentId = agent.body.data.id;
  const tier = await t.http.post(`/agents/${agentId}/pricing`, {
    ...as,
    json: { name: 'Free', priceCents: 0, currency: 'usd', interval: 'month', isPublic: true, features: [] },
  });
  const metric = await t.http.post(`/agents/${agentId}/metric-definitions`, { ...as, json: { slug: 'summaries', name: 'Summaries', kind: 'rolling' } });
  expect((await t.http.put(`/agents/${agentId}/pricing/${tier.body.data.id}/quotas/${metric.body.data.id}`, { ...as, json: { quotaLimit: 2 } })).status).toBe(201);

  user = await signUp(t);
  expect((await t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: tier.body.data.id } })).status).toBe(201);

  clientId = agent.body.data.oauthClient.clientId;
  app = agentBackend({
    marketplaceUrl: t.baseUrl,
    agentId,
    clientId,
    clientSecret: agent.body.data.oauthClient.clientSecret,
    publicUrl: backendUrl,
    metric: 'summaries',
  });
  ({ context: browser, close: closeBrowser } = await launchChromiumProfile());
});

afterAll(async () => {
  await closeBrowser?.();
  await new Promise<void>((resolve) => (backend ? backend.close(() => resolve()) : resolve()));
  await t?.close();
});

test('a user signs in to the example agent through the marketplace, and each call is metered until the quota', async () => {
  const page = await browser.newPage();
  await page.goto(backendUrl);
  await page.click('#sign-in');
  await page.waitForURL((url) => url.pathname === '/sign-in');
  await page.fill('#email', user.email);
  await page.fill('#password', user.password);
  await page.click('#submit');
  await page.waitForURL((url) => url.pathname === '/consent');
  await page.click('#allow');
  await page.waitForURL((url) => url.href === `${backendUrl}/`);
  expect(await page.textContent('#quota')).toBe('2 of 2 left');

  await page.click('#summarize');
  expect(await page.textContent('#result')).toContain('call 1');
  expect(await page.textContent('#quota')).toBe('1 of 2 left');
  await page.goto(backendUrl);
  await page.click('#summarize');
  expect(await page.textContent('#result')).toContain('call 2');
  await page.goto(backendUrl);
  await page.click('#summarize');
  expect(await page.textContent('#result')).toMatch(/quota is used up \(2 of 2\)\. It resets on \d{4}-\d{2}-\d{2}\./);
  await screenshot(page, 'example-agent-backend-quota.png');

  // the marketplace counted exactly what the agent showed
  const usage = await t.http.get(`/me/usage/${agentId}/summaries`, { cookie: user.cookie });
  expect(usage.body.data).toMatchObject({ used: 2, limit: 2, remaining: 0 });

  // The user withdraws consent at the marketplace: the agent's next page sends them through sign-in again (here the
  // consent page, still signed in at the marketplace), not to a 500 (found by a newcomer's walkthrough).
  const consents = await t.http.get('/api/auth/oauth2/get-consents', { cookie: user.cookie });
  expect(consents.status, consents.text).toBe(200);
  const consent = (consents.body as Array<{ id: string; clientId: string }>).find((c) => c.clientId === clientId)!;
  const withdrawn = await t.http.post('/api/auth/oauth2/delete-consent', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { id: consent.id } });
  expect(withdrawn.status, withdrawn.text).toBe(200);
  await page.goto(backendUrl);
  await page.waitForURL((url) => url.pathname === '/consent');
  await page.close();
}, 120_000);
