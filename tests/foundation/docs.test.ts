import { compileErrors, validate } from '@readme/openapi-parser';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { blockOtherHosts, launchChromium } from '../support/browser.ts';

/**
 * GET /openapi.json is a valid OpenAPI 3.1 document covering every route of every domain (validated with a
 * well-known validator, so a broken schema anywhere fails here), and GET /docs renders it in a real browser
 * without internet access: the Scalar script comes from the service itself.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

type Operation = { operationId?: string; responses?: Record<string, unknown> };
type Paths = Record<string, Record<string, Operation>>;
const methods = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];

describe('GET /openapi.json', () => {
  let doc: { openapi: string; paths: Paths; servers: Array<{ url: string }> };
  beforeAll(async () => {
    const res = await t.http.get('/openapi.json');
    expect(res.status).toBe(200);
    doc = res.body;
  });

  it('is valid OpenAPI 3.1', async () => {
    expect(doc.openapi).toBe('3.1.0');
    const result = await validate(structuredClone(doc) as never);
    expect(result.valid, result.valid ? '' : compileErrors(result)).toBe(true);
  });

  it('gives every operation a unique operationId and at least one response', () => {
    const ids: string[] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        if (!methods.includes(method)) continue;
        expect(op.operationId, `${method.toUpperCase()} ${path}`).toMatch(/^[a-z][A-Za-z0-9]*$/);
        expect(Object.keys(op.responses ?? {}).length, `${method.toUpperCase()} ${path}`).toBeGreaterThan(0);
        ids.push(op.operationId!);
      }
    }
    expect(ids.length - new Set(ids).size, 'duplicate operationIds').toBe(0);
    expect(ids).toEqual(expect.arrayContaining(['getHealth', 'getReady']));
  });

  it('names the service itself as the server', () => {
    expect(doc.servers).toEqual([{ url: t.baseUrl }]);
  });
});

describe('GET /docs', () => {
  it('is an HTML page that loads its script from this service, not a CDN', async () => {
    const res = await t.http.get('/docs');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(res.text).toContain('src="docs/scalar.js"');
    expect(res.text).toContain('"url": "openapi.json"');
    expect(res.text).not.toMatch(/https?:\/\/cdn/);
  });

  it('serves the Scalar bundle as JavaScript', async () => {
    const res = await t.http.get('/docs/scalar.js');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/javascript/);
    expect(res.text.length).toBeGreaterThan(100_000);
    expect(res.headers.get('x-request-id')).toEqual(expect.any(String));
  });

  describe('in headless Chromium with every other host unreachable', () => {
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
      const specLoaded = page.waitForResponse((r) => r.url() === `${origin}/openapi.json` && r.status() === 200, { timeout: 60_000 });
      await page.goto(`${t.baseUrl}/docs`);
      await specLoaded;
      // Operation summaries from the route definitions appear once the reference has rendered.
      await page.getByText('Liveness: answers without touching the database', { exact: false }).first().waitFor({ timeout: 60_000 });
      await page.getByText('Readiness', { exact: false }).first().waitFor({ timeout: 10_000 });
      expect(await page.title()).toBe('Agent Marketplace API');
      expect(errors).toEqual([]);
      // Nothing the page needs comes from elsewhere (fonts may be asked for; the page renders without them).
      expect(blocked.filter((u) => /\.(js|mjs|json)(\?|$)/.test(u))).toEqual([]);
      await context.close();
    }, 120_000);
  });
});
