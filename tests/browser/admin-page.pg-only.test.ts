import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { launchChromiumProfile, screenshot } from '../support/browser.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { FROM, NOW, TO, WEEKS, seedScenario, type Scenario } from '../admin/scenario.ts';

/**
 * The admin page in a real browser (headless Debian Chromium via playwright-core): an admin's session cookie,
 * GET /admin for the seeded scenario's window, and the funnel and weekly trend charts drawn with the known
 * numbers. Everything the page needs comes from the service itself (strict CSP; requests to other hosts are
 * counted and must be zero). Screenshots go to .test-artifacts/.
 */

let t: TestApp;
let browser: BrowserContext;
let closeBrowser: (() => Promise<void>) | undefined;
let admin: TestUser;
let s: Scenario;

beforeAll(async () => {
  t = await startTestApp({ now: NOW });
  admin = await createAdmin(t);
  s = await seedScenario(t);
  ({ context: browser, close: closeBrowser } = await launchChromiumProfile());
});

afterAll(async () => {
  await closeBrowser?.();
  await t?.close();
});

/** A new tab signed in with the given session cookie (or none), recording page errors and foreign requests. */
async function pageAs(user: TestUser | null): Promise<{ page: Page; problems: string[] }> {
  await browser.clearCookies();
  if (user) {
    await browser.addCookies(
      user.cookie.split('; ').map((pair) => {
        const i = pair.indexOf('=');
        return { name: pair.slice(0, i), value: pair.slice(i + 1), url: t.baseUrl };
      }),
    );
  }
  const page = await browser.newPage();
  const problems: string[] = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error') problems.push(`console: ${msg.text()}`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`${r.status()} from ${r.url()}`);
  });
  page.on('request', (req) => {
    if (!req.url().startsWith(t.baseUrl)) problems.push(`foreign request: ${req.url()}`);
  });
  return { page, problems };
}

const attr = (page: Page, selector: string, name: string) =>
  page.$$eval(selector, (nodes, n) => nodes.map((node) => node.getAttribute(n)), name);

test('an admin sees the funnel and weekly trends drawn from the analytics endpoint', async () => {
  const { page, problems } = await pageAs(admin);
  const res = await page.goto(`${t.baseUrl}/admin?from=${encodeURIComponent(FROM)}&to=${encodeURIComponent(TO)}`);
  expect(res?.status()).toBe(200);
  await page.waitForSelector('body[data-state="ready"]', { timeout: 15_000 });

  // Funnel: one bar per stage, values from the scenario, bar widths proportional to purchased.
  expect(await attr(page, '#funnel-chart g[data-stage]', 'data-stage')).toEqual(['purchased', 'activated', 'used']);
  expect(await attr(page, '#funnel-chart g[data-stage]', 'data-value')).toEqual(['6', '5', '2']);
  expect(await attr(page, '#funnel-chart rect.bar', 'width')).toEqual(['480', '400', '160']);
  expect(await page.textContent('#funnel-chart')).toContain('Purchased');
  expect(await page.textContent('#funnel-chart g[data-stage="used"] .value')).toContain('33%');

  // Trends: one group per ISO week, with bars for new and canceled and a point on the active line.
  expect(await attr(page, '#trends-chart g.week', 'data-week')).toEqual(WEEKS);
  expect(await attr(page, '#trends-chart g.week', 'data-new')).toEqual(['1', '1', '0', '1', '1', '1', '0', '1']);
  expect(await attr(page, '#trends-chart g.week', 'data-cancellations')).toEqual(['1', '0', '0', '0', '0', '0', '1', '0']);
  expect(await attr(page, '#trends-chart g.week', 'data-active')).toEqual(['3', '4', '4', '5', '6', '7', '6', '7']);
  const line = await page.getAttribute('#trends-chart polyline.line.active', 'points');
  expect(line?.trim().split(' ')).toHaveLength(8);
  // The highest week is drawn at the top of the plot and the emptiest bars have no height.
  const ys = (line ?? '').trim().split(' ').map((p) => Number(p.split(',')[1]));
  expect(Math.min(...ys)).toBe(ys[5]);
  const box = await page.locator('#trends-chart').boundingBox();
  expect(box?.width).toBeGreaterThan(600);

  const rows = await page.$$eval('#per-agent tbody tr', (trs) => trs.map((tr) => Array.from(tr.children, (td) => td.textContent)));
  expect(rows).toEqual([
    [`Alpha (${s.alpha.slug})`, '4', '3', '1'],
    [`Beta (${s.beta.slug})`, '2', '2', '1'],
  ]);
  await screenshot(page, 'admin-page.png', { fullPage: true });

  // The form asks again for one agent and the charts are redrawn.
  await page.fill('#agentId', s.alpha.id);
  await page.click('#window button[type="submit"]');
  await page.waitForFunction(
    () => document.querySelector('#funnel-chart g[data-stage="purchased"]')?.getAttribute('data-value') === '4',
    undefined,
    { timeout: 15_000 },
  );
  expect(await attr(page, '#trends-chart g.week', 'data-active')).toEqual(['2', '3', '3', '3', '4', '5', '4', '5']);
  expect(new URL(page.url()).searchParams.get('agentId')).toBe(s.alpha.id);
  await screenshot(page, 'admin-page-one-agent.png', { fullPage: true });

  expect(problems).toEqual([]);
  await page.close();
});

test('an error from the endpoint is shown instead of charts', async () => {
  const { page } = await pageAs(admin);
  await page.goto(`${t.baseUrl}/admin?from=2026-11-02&to=2026-11-01`);
  await page.waitForSelector('body[data-state="error"]', { timeout: 15_000 });
  expect(await page.textContent('#status')).toContain('not valid');
  expect(await page.$$('#funnel-chart g[data-stage]')).toHaveLength(0);
  await page.close();
});

test('signed out: a 401 page pointing to sign-in; a signed-in non-admin: a 403 page, and no charts', async () => {
  const anonymous = await pageAs(null);
  const res = await anonymous.page.goto(`${t.baseUrl}/admin`);
  expect(res?.status()).toBe(401);
  expect(await anonymous.page.getAttribute('#sign-in', 'href')).toBe(`${t.baseUrl}/sign-in`);
  expect(await anonymous.page.$('#funnel-chart')).toBeNull();
  await screenshot(anonymous.page, 'admin-page-401.png');
  await anonymous.page.close();

  const user = await signUp(t);
  const signedIn = await pageAs(user);
  const forbidden = await signedIn.page.goto(`${t.baseUrl}/admin`);
  expect(forbidden?.status()).toBe(403);
  expect(await signedIn.page.textContent('body')).toContain('not a platform admin');
  expect(await signedIn.page.$('#funnel-chart')).toBeNull();
  await signedIn.page.close();
});
