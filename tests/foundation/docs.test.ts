import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { compileErrors, validate } from '@readme/openapi-parser';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { docsRoutes, SWAGGER_UI_CDN, SWAGGER_UI_INTEGRITY, SWAGGER_UI_VERSION } from '../../functions/http/docs.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { blockOtherHosts, launchChromium } from '../support/browser.ts';

/**
 * GET /openapi.json is a valid OpenAPI 3.1 document covering every route of every domain (validated with a
 * well-known validator, so a broken schema anywhere fails here), and GET /docs renders it in a real browser
 * without internet access: the renderer (Swagger UI from swagger-ui-dist) comes from the service itself.
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
  it('is an HTML page that loads its renderer from this service, not a CDN', async () => {
    const res = await t.http.get('/docs');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(res.text).toContain('<script src="docs/swagger-ui.js"></script>');
    expect(res.text).toContain('"url":"openapi.json"');
    expect(res.text).not.toMatch(/https?:\/\//);
    // Scripts only from this origin or with the page's nonce; never framed.
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp).toMatch(/script-src 'self' 'nonce-[A-Za-z0-9+/=]+'(;|$)/);
    expect(csp).toContain("frame-ancestors 'none'");
  });

  it('serves the renderer (swagger-ui-dist bundle and stylesheet) as one JavaScript file', async () => {
    const res = await t.http.get('/docs/swagger-ui.js');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/javascript/);
    expect(res.text.length).toBeGreaterThan(1_000_000);
    expect(res.text).toContain('SwaggerUIBundle');
    expect(res.text).toContain('.swagger-ui');
    expect(res.headers.get('x-request-id')).toEqual(expect.any(String));
  });

  it('pins the version package.json installs, and the edge page loads exactly those files from the CDN', async () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { dependencies: Record<string, string> };
    expect(pkg.dependencies['swagger-ui-dist']).toBe(SWAGGER_UI_VERSION);
    const dir = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
    for (const [file, integrity] of Object.entries(SWAGGER_UI_INTEGRITY)) {
      expect(`sha384-${createHash('sha384').update(readFileSync(join(dir, file))).digest('base64')}`, file).toBe(integrity);
    }
    // Without a local script (the Deno edge entry), the same page takes both files from the CDN, integrity-checked.
    const res = await docsRoutes({}).request('/docs');
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toContain(`<script src="${SWAGGER_UI_CDN}/swagger-ui-bundle.js" integrity="${SWAGGER_UI_INTEGRITY['swagger-ui-bundle.js']}" crossorigin="anonymous">`);
    expect(html).toContain(`<link rel="stylesheet" href="${SWAGGER_UI_CDN}/swagger-ui.css" integrity="${SWAGGER_UI_INTEGRITY['swagger-ui.css']}"`);
    expect(res.headers.get('content-security-policy')).toContain(`script-src ${new URL(SWAGGER_UI_CDN).origin} 'nonce-`);
    expect((await docsRoutes({}).request('/docs/swagger-ui.js')).status).toBe(404);
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
      page.on('console', (msg) => {
        if (msg.type() === 'error') errors.push(msg.text());
      });
      const specLoaded = page.waitForResponse((r) => r.url() === `${origin}/openapi.json` && r.status() === 200, { timeout: 60_000 });
      await page.goto(`${t.baseUrl}/docs`);
      await specLoaded;
      // Operation summaries from the route definitions appear once the reference has rendered.
      await page.locator('.opblock-summary-description', { hasText: 'Liveness: answers without touching the database' }).first().waitFor({ timeout: 60_000 });
      await page.locator('.opblock-summary-path', { hasText: '/ready' }).first().waitFor({ timeout: 10_000 });
      expect(await page.locator('.opblock').count()).toBeGreaterThan(50);
      // The stylesheet came with the script: Swagger UI's own layout rules apply.
      expect(await page.locator('.swagger-ui .info .title').first().evaluate((el) => getComputedStyle(el).fontSize)).toBe('36px');
      expect(await page.title()).toBe('Agent Marketplace API');
      expect(errors).toEqual([]);
      // Nothing the page needs comes from elsewhere.
      expect(blocked).toEqual([]);
      await context.close();
    }, 120_000);
  });
});
