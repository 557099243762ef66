import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { meteredAgent } from '../metering/support.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { launchChromiumProfile, screenshot } from '../support/browser.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { addEndpoint, drain, Receiver } from './support.ts';

/**
 * The admin page's webhook section in headless Chromium: with an agent named in the form, the page lists the
 * agent's endpoints and their latest deliveries from the admin API, as text (an endpoint URL that looks like HTML
 * stays text). Screenshot: .test-artifacts/admin-page-webhooks.png.
 */

let t: TestApp;
let admin: TestUser;
let hook: Receiver;
let browser: BrowserContext;
let closeBrowser: (() => Promise<void>) | undefined;

beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  hook = await Receiver.start();
  ({ context: browser, close: closeBrowser } = await launchChromiumProfile());
});
afterAll(async () => {
  await closeBrowser?.();
  await hook.close();
  await t?.close();
});

async function adminTab(): Promise<{ page: Page; problems: string[] }> {
  await browser.clearCookies();
  await browser.addCookies(
    admin.cookie.split('; ').map((pair) => {
      const i = pair.indexOf('=');
      return { name: pair.slice(0, i), value: pair.slice(i + 1), url: t.baseUrl };
    }),
  );
  const page = await browser.newPage();
  const problems: string[] = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('request', (req) => {
    if (!req.url().startsWith(t.baseUrl)) problems.push(`foreign request: ${req.url()}`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`${r.status()} from ${r.url()}`);
  });
  return { page, problems };
}

test('lists the agent’s endpoints and their latest deliveries, as text', async () => {
  const agent = await meteredAgent(t.db, []);
  const endpoint = await addEndpoint(t, admin, agent.agentId, hook, ['subscription.created']);
  const odd = await t.http.post(`/admin/agents/${agent.agentId}/webhooks`, {
    cookie: admin.cookie,
    json: { url: 'https://agent.example.com/<img src=x onerror=alert(1)>', events: ['subscription.canceled'] },
  });
  expect(odd.status, odd.text).toBe(201);
  await t.http.patch(`/admin/agents/${agent.agentId}/webhooks/${odd.body.data.id}`, { cookie: admin.cookie, json: { enabled: false } });

  for (let i = 0; i < 2; i++) {
    const u = await signUp(t);
    expect((await t.http.post('/me/checkout', { cookie: u.cookie, json: { tierId: agent.tierId } })).status).toBe(201);
  }
  hook.mode = { status: 200 };
  await drain(t, { limit: 1 });
  hook.mode = { status: 500 };
  await drain(t, { limit: 1 });

  const { page, problems } = await adminTab();
  await page.goto(`${t.baseUrl}/admin?agentId=${agent.agentId}`);
  await page.waitForSelector('#webhooks[data-state="ready"]');
  await screenshot(page, 'admin-page-webhooks.png', { fullPage: true });

  const boxes = await page.$$eval('#webhook-list .webhook', (nodes) =>
    nodes.map((n) => ({
      id: (n as HTMLElement).dataset.webhookId,
      title: n.querySelector('h3')!.textContent,
      events: n.querySelector('.events')!.textContent,
      rows: [...n.querySelectorAll('tbody tr')].map((r) => ({
        status: (r as HTMLElement).dataset.status,
        cells: [...r.querySelectorAll('td')].map((c) => c.textContent),
      })),
    })),
  );
  expect(boxes.map((b) => b.id).sort()).toEqual([endpoint.id, odd.body.data.id].sort());
  const main = boxes.find((b) => b.id === endpoint.id)!;
  expect(main.title).toBe(hook.url);
  expect(main.events).toBe('Events: subscription.created');
  expect(main.rows.map((r) => r.status)).toEqual(['pending', 'delivered']);
  expect(main.rows[0]!.cells.slice(1, 5)).toEqual(['subscription.created', 'pending', '1', expect.stringContaining('500')]);
  expect(main.rows[1]!.cells.slice(1, 5)).toEqual(['subscription.created', 'delivered', '1', '200']);
  const other = boxes.find((b) => b.id === odd.body.data.id)!;
  // kept as the URL parser reads it (markup in a url reaches nothing as markup: it is percent-encoded), shown as text
  expect(odd.body.data.url).toBe('https://agent.example.com/%3Cimg%20src=x%20onerror=alert(1)%3E');
  expect(other.title).toBe(`${odd.body.data.url} (disabled)`);
  expect(other.rows[0]!.cells[0]).toBe('No deliveries yet');
  expect(await page.$$('#webhook-list img')).toHaveLength(0);
  // the secret is never on the page
  expect(await page.content()).not.toContain(endpoint.secret.slice(6));
  expect(problems).toEqual([]);

  // Without an agent the section stays hidden.
  await page.goto(`${t.baseUrl}/admin`);
  await page.waitForFunction(() => document.body.dataset.state === 'ready');
  expect(await page.isHidden('#webhooks')).toBe(true);
  await page.close();

  await sql`delete from public.webhook_endpoints where agent_id = ${agent.agentId}`.execute(t.db);
});
