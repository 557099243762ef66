import { afterAll, beforeAll, expect, test } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { seedDemoCatalog } from '../../scripts/seed.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { launchChromiumProfile, screenshot } from '../support/browser.ts';
import { createAdmin, type TestUser } from '../support/users.ts';

/**
 * What a new user sees on first start: `npm start` seeds the demo catalog and its activity (scripts/seed.ts, the
 * same function called here), and /admin, with its default window (the last 90 days), draws non-empty charts from
 * it. The screenshot is .test-artifacts/admin-first-start.png.
 */

let t: TestApp;
let admin: TestUser;
let browser: Awaited<ReturnType<typeof launchChromiumProfile>> | undefined;

beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  expect(await seedDemoCatalog(t.deps)).toEqual({ seeded: true });
  browser = await launchChromiumProfile();
});

afterAll(async () => {
  await browser?.close();
  await t?.close();
});

const attr = (page: import('playwright-core').Page, selector: string, name: string) =>
  page.$$eval(selector, (nodes, n) => nodes.map((node) => node.getAttribute(n)), name);

test('on first start /admin shows the demo subscriptions, activation, usage and weekly trends', async () => {
  const context = browser!.context;
  await context.addCookies(
    admin.cookie.split('; ').map((pair) => {
      const i = pair.indexOf('=');
      return { name: pair.slice(0, i), value: pair.slice(i + 1), url: t.baseUrl };
    }),
  );
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('pageerror', (err) => problems.push(err.message));
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`${r.status()} from ${r.url()}`);
  });
  expect((await page.goto(`${t.baseUrl}/admin`))?.status()).toBe(200);
  await page.waitForSelector('body[data-state="ready"]', { timeout: 15_000 });

  // The funnel: every demo subscription is a purchase; most were used, some not (the seed's every fifth).
  const [purchased, activated, used] = (await attr(page, '#funnel-chart g[data-stage]', 'data-value')).map(Number);
  expect(purchased).toBe(14);
  expect(activated).toBeGreaterThan(0);
  expect(activated).toBeLessThan(purchased!);
  expect(used).toBeGreaterThan(0);

  // The trends: eight weeks of new subscriptions, some cancellations, and an active line that rises.
  const added = (await attr(page, '#trends-chart g.week', 'data-new')).map(Number);
  const canceled = (await attr(page, '#trends-chart g.week', 'data-cancellations')).map(Number);
  const active = (await attr(page, '#trends-chart g.week', 'data-active')).map(Number);
  expect(added.reduce((a, b) => a + b, 0)).toBe(14);
  expect(added.filter((n) => n > 0).length).toBeGreaterThanOrEqual(7);
  expect(canceled.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
  expect(active.at(-1)).toBe(14 - canceled.reduce((a, b) => a + b, 0));
  expect(await page.getAttribute('#trends-chart polyline.line.active', 'points')).toMatch(/\d/);

  // Per agent: both active agents with a free tier have subscribers.
  const rows = await page.$$eval('#per-agent tbody tr', (trs) => trs.map((tr) => tr.children[0]?.textContent));
  expect(rows).toEqual(expect.arrayContaining([expect.stringContaining('Meeting Notes'), expect.stringContaining('Support Copilot')]));
  await screenshot(page, 'admin-first-start.png', { fullPage: true });
  expect(problems).toEqual([]);

  // The demo usage went through the metering rule: the counters equal the ledger's increments.
  const totals = await first<{ counted: number; ledger: number }>(
    t.db,
    sql`select (select coalesce(sum(used), 0)::int from public.usage_counters) as counted,
               (select coalesce(sum(delta), 0)::int from public.quota_ledger where event = 'increment') as ledger`,
  );
  expect(totals!.counted).toBeGreaterThan(0);
  expect(totals!.counted).toBe(totals!.ledger);
  await page.close();
});
