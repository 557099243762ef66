import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { blockOtherHosts, launchChromium } from '../support/browser.ts';

/**
 * GET /docs in a real browser without internet access: the renderer (Swagger UI from swagger-ui-dist) comes from the
 * service itself and shows the operations of /openapi.json. The page and the document are the same on either database
 * (tests/foundation/docs.test.ts checks both on both), so the browser runs once, on the real-server tier.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

describe('GET /docs in headless Chromium with every other host unreachable', () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await launchChromium();
  }, 60_000);
  afterAll(() => browser?.close());

  it('renders the operations from /openapi.json', async () => {
    const context = await browser.newContext();
    const origin = new URL(t.baseUrl).origin;
    const blocked = await blockOtherHosts(context, origin);
    const page = await context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (err) => errors.push(err.message));
    page.on('console', (msg) => {
      if (msg.type() === 'error') errors.push(msg.text());
    });
    const specLoaded = page.waitForResponse((r) => r.url() === `${origin}/openapi.json` && r.status() === 200, { timeout: 60_000 });
    // Over 100 operations, Swagger UI renders only what is on screen (virtualized): a deep link (#/<tag>/<operationId>)
    // brings one into view. An app route and an auth-library route, each under its audience's group.
    await page.goto(`${t.baseUrl}/docs#/${encodeURIComponent('Operations · Health')}/getHealth`);
    await specLoaded;
    await page.locator('.opblock-summary-description', { hasText: 'Liveness: answers without touching the database' }).first().waitFor({ timeout: 60_000 });
    await page.locator('.opblock-summary-path', { hasText: '/ready' }).first().waitFor({ timeout: 10_000 });
    await page.goto(`${t.baseUrl}/docs#/${encodeURIComponent('Agent backends · OAuth 2.1 and OIDC')}/authPostOauth2Token`);
    await page.reload();
    await page.locator('[id$="-authPostOauth2Token"]').waitFor({ timeout: 30_000 });
    // The stylesheet came with the script: Swagger UI's own layout rules apply.
    expect(await page.locator('.swagger-ui .info .title').first().evaluate((el) => getComputedStyle(el).fontSize)).toBe('36px');
    expect(await page.title()).toBe('Agent Marketplace API');
    expect(errors).toEqual([]);
    // Nothing the page needs comes from elsewhere.
    expect(blocked).toEqual([]);
    await context.close();
  }, 120_000);
});
