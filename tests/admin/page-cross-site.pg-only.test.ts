import { createServer, type Server } from 'node:http';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { launchChromiumProfile } from '../support/browser.ts';
import { createAdmin, type TestUser } from '../support/users.ts';

/**
 * The /admin page opened by another site (security rule 29), in a real browser. Review 22: the page runs the window of
 * its own URL (`?from&to&agentId`) with a same-origin fetch the API takes as the admin's, and GET /admin answered any
 * navigation; so a page of another site that opened a popup on one click, then set its location to
 * /admin?from=2021-11-22&to=2026-11-20 again and again, made the admin's browser compute the five-year window on every
 * navigation (and, analytics running one at a time per admin, kept the admin's own at 429). A link from elsewhere
 * still opens the page signed in; the page then waits for the admin's Show.
 * The other site here is http://localhost:<port> (another site than the app's http://127.0.0.1:<port>).
 */
let t: TestApp;
let admin: TestUser;
let browser: BrowserContext;
let closeBrowser: (() => Promise<void>) | undefined;
let evil: Server;
let evilUrl: string;
let keeper: Page;

const WINDOW = 'from=2021-11-22&to=2026-11-20'; // five years: the heaviest window the endpoint takes

beforeAll(async () => {
  t = await startTestApp({ now: '2026-11-20T12:00:00Z' });
  admin = await createAdmin(t);
  // The other site's pages: /popup opens a popup on one click, then navigates it on its own, again and again;
  // /link is a plain link.
  evil = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const target = t.baseUrl + (url.searchParams.get('target') ?? '');
    res.writeHead(200, { 'content-type': 'text/html' });
    if (url.pathname === '/link') {
      res.end(`<!doctype html><a id="go" href="${target.replaceAll('&', '&amp;')}">Marketplace analytics</a>`);
      return;
    }
    res.end(`<!doctype html><button id="go">Play</button><script>
      document.getElementById('go').onclick = () => {
        const w = window.open(${JSON.stringify(target)} + 'T00:00:00Z', 'victim');
        let n = 0;
        const timer = setInterval(() => {
          if (++n > 3) { clearInterval(timer); document.title = 'done'; return; }
          w.location = ${JSON.stringify(target)} + 'T00:00:0' + n + 'Z'; // a new URL each time, every key one the route has
        }, 1500);
      };
    </script>`);
  });
  await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', () => resolve()));
  evilUrl = `http://localhost:${(evil.address() as { port: number }).port}`;
  ({ context: browser, close: closeBrowser } = await launchChromiumProfile());
  await browser.addCookies(
    admin.cookie.split('; ').map((pair) => {
      const i = pair.indexOf('=');
      return { name: pair.slice(0, i), value: pair.slice(i + 1), url: t.baseUrl };
    }),
  );
  keeper = browser.pages()[0] ?? (await browser.newPage());
});

afterAll(async () => {
  await closeBrowser?.();
  await new Promise((resolve) => evil?.close(resolve));
  await t?.close();
});

/** Records the statuses of the analytics requests the browser makes (any tab) while `run` runs. */
async function analyticsDuring(run: () => Promise<void>): Promise<number[]> {
  const statuses: number[] = [];
  const onResponse = (r: { url(): string; status(): number }) => {
    if (r.url().startsWith(`${t.baseUrl}/admin/analytics`)) statuses.push(r.status());
  };
  browser.on('response', onResponse);
  try {
    await run();
  } finally {
    browser.off('response', onResponse);
  }
  return statuses;
}

/** The other site's popup page runs against `target`; returns the popup's last page and the analytics statuses. */
async function popupAttack(target: string): Promise<{ statuses: number[]; popupState: string | undefined }> {
  let popupState: string | undefined;
  const statuses = await analyticsDuring(async () => {
    const page = await browser.newPage();
    const popup = page.waitForEvent('popup');
    await page.goto(`${evilUrl}/popup?target=${encodeURIComponent(target)}`);
    await page.click('#go');
    const victim = await popup;
    await page.waitForFunction(() => document.title === 'done', undefined, { timeout: 20_000 });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    popupState = await victim.evaluate(() => document.body?.dataset.state).catch(() => undefined);
  });
  // (one tab stays open: closing the last one ends the browser session, and with it the session cookie)
  for (const p of browser.pages()) if (p !== keeper) await p.close();
  return { statuses, popupState };
}

test("control: another site's navigations of /admin/analytics itself are refused", async () => {
  const { statuses } = await popupAttack(`/admin/analytics?${WINDOW}`);
  expect(statuses.length).toBeGreaterThan(0);
  expect(statuses.every((s) => s === 403)).toBe(true);
});

test("attack: another site's popup navigated through /admin?from&to again and again computes no analytics", async () => {
  const { statuses, popupState } = await popupAttack(`/admin?${WINDOW}`);
  // Each navigation gets the page, which waits for the admin's Show: no analytics request at all.
  expect({ statuses, popupState }).toEqual({ statuses: [], popupState: 'waiting' });
});

test('a link from another site opens the page signed in with its window filled in; it loads once the admin presses Show', async () => {
  const page = await browser.newPage();
  const statuses = await analyticsDuring(async () => {
    await page.goto(`${evilUrl}/link?target=${encodeURIComponent(`/admin?${WINDOW}`)}`);
    await Promise.all([page.waitForURL(`${t.baseUrl}/admin?*`), page.click('#go')]);
    await page.waitForSelector('body[data-state="waiting"]', { timeout: 15_000 });
    await new Promise((resolve) => setTimeout(resolve, 500));
  });
  expect(statuses).toEqual([]);
  expect(await page.textContent('#status')).toContain('press Show');
  expect([await page.inputValue('#from'), await page.inputValue('#to')]).toEqual(['2021-11-22', '2026-11-20']);

  const afterShow = await analyticsDuring(async () => {
    await page.click('#window button[type="submit"]');
    await page.waitForSelector('body[data-state="ready"]', { timeout: 15_000 });
  });
  expect(afterShow).toEqual([200]);
  expect(await page.textContent('#window-text')).toContain('2021-11-22');
  await page.close();
});
