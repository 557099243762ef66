import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { compileErrors, validate } from '@readme/openapi-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { docsRoutes, SWAGGER_UI_CDN, SWAGGER_UI_INTEGRITY, SWAGGER_UI_VERSION } from '../../functions/http/docs.ts';
import { docsVendorDir } from '../../scripts/vendor-docs.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { contractText } from '../support/contract.ts';
import { insertAgent } from '../support/fixtures.ts';
import { signUp } from '../support/users.ts';

/**
 * GET /openapi.json is a valid OpenAPI 3.1 document covering every route of every domain (validated with a
 * well-known validator, so a broken schema anywhere fails here), and GET /docs renders it in a real browser
 * without internet access: the renderer (Swagger UI from swagger-ui-dist) comes from the service itself (that in a
 * real browser: tests/browser/docs-page.pg-only.test.ts).
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

  it('gives every operation a unique operationId and the answer it gives when it works (a 2xx or 3xx)', () => {
    const ids: string[] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        if (!methods.includes(method)) continue;
        expect(op.operationId, `${method.toUpperCase()} ${path}`).toMatch(/^[a-z][A-Za-z0-9]*$/);
        // Seven of the auth library's organization and logout calls listed errors only: a generated client had no type
        // for their answers. The one exception is the contract's: telemetry answers 501 NOT_IMPLEMENTED.
        const works = Object.keys(op.responses ?? {}).filter((status) => /^[23]/.test(status));
        if (op.operationId !== 'getAgentTelemetry') expect(works, `${method.toUpperCase()} ${path}`).not.toEqual([]);
        ids.push(op.operationId!);
      }
    }
    expect(ids.length - new Set(ids).size, 'duplicate operationIds').toBe(0);
    expect(ids).toEqual(expect.arrayContaining(['getHealth', 'getReady']));
  });

  it('holds every /api/auth operation the contract names (Auth and OAuth sections), the OAuth client calls with form bodies', () => {
    const text = contractText();
    if (process.env.CI) expect(text, 'CI runs with shared/ beside the repository').toBeDefined();
    const named = authOperationsNamedBy(text ?? '');
    expect(named.length).toBeGreaterThan(20);
    const missing = named.filter(({ method, path }) => !doc.paths[path]?.[method.toLowerCase()]);
    expect(missing).toEqual([]);
    for (const path of ['/api/auth/oauth2/token', '/api/auth/oauth2/revoke', '/api/auth/oauth2/introspect']) {
      const body = (doc.paths[path]!.post as Record<string, any>).requestBody;
      expect(Object.keys(body.content)[0], path).toBe('application/x-www-form-urlencoded');
    }
    expect((doc.paths['/api/auth/oauth2/authorize']!.get as Record<string, any>).description).toContain('200 {"redirect": true');
  });

  it('puts every tag under its audience: Agent backends, Front end, Admin (and Operations)', () => {
    const grouped = (doc as Record<string, any>)['x-tagGroups'] as Array<{ name: string; tags: string[] }>;
    expect(grouped.map((g) => g.name)).toEqual(['Agent backends', 'Front end', 'Admin', 'Operations']);
    const inGroups = new Set(grouped.flatMap((g) => g.tags));
    const used = new Set(
      Object.values(doc.paths).flatMap((item) => Object.entries(item).flatMap(([m, op]) => (methods.includes(m) ? ((op as { tags?: string[] }).tags ?? []) : []))),
    );
    expect([...used].filter((tag) => !inGroups.has(tag))).toEqual([]);
    const tagOf = (path: string, method: string) => (doc.paths[path]![method] as { tags: string[] }).tags[0];
    expect(tagOf('/me/usage/{agentId}/{metricSlug}/increment', 'post')).toBe('Agent backends · Usage');
    expect(tagOf('/api/auth/oauth2/token', 'post')).toBe('Agent backends · OAuth 2.1 and OIDC');
    expect(tagOf('/api/auth/sign-in/email', 'post')).toBe('Front end · Sign-in and account');
    expect(tagOf('/admin/users', 'get')).toBe('Admin · Administration');
  });

  it('marks a JSON body optional where every field of it is (a request without one is read as `{}`), required elsewhere', async () => {
    const bodyOf = (path: string, method: string) => (doc.paths[path]![method] as Record<string, any>).requestBody;
    expect(bodyOf('/agents/{agentId}/demo-requests', 'post').required).toBe(false);
    expect(bodyOf('/agents/{agentId}/enterprise-inquiries', 'post').required).toBe(false);
    expect(bodyOf('/me/usage/{agentId}/{metricSlug}/increment', 'post').required).toBe(true);
    expect(bodyOf('/agents', 'post').required).toBe(true);
    // What the document says holds: an optional body may be left out (a required one may not).
    const user = await signUp(t, { verified: true });
    const agent = await insertAgent(t.db);
    expect((await t.http.post(`/agents/${agent.id}/demo-requests`, { cookie: user.cookie })).status).toBe(202);
    expect((await t.http.post(`/agents/${agent.id}/enterprise-inquiries`, { cookie: user.cookie })).status).toBe(202);
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

  it('pins the version package.json installs, serves the vendored copies of its files, and the edge page loads exactly those files from the CDN', async () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { dependencies: Record<string, string>; devDependencies: Record<string, string> };
    // A development tool only (npm run gen:docs-vendor copies from it): a production install does without it.
    expect(pkg.devDependencies['swagger-ui-dist']).toBe(SWAGGER_UI_VERSION);
    expect(pkg.dependencies['swagger-ui-dist']).toBeUndefined();
    const dir = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
    const sha384 = (path: string) => `sha384-${createHash('sha384').update(readFileSync(path)).digest('base64')}`;
    for (const [file, integrity] of Object.entries(SWAGGER_UI_INTEGRITY)) {
      expect(sha384(join(dir, file)), file).toBe(integrity);
      // The copy the service serves (else: npm run gen:docs-vendor).
      expect(sha384(join(docsVendorDir, file)), `vendor/swagger-ui/${file} (run npm run gen:docs-vendor)`).toBe(integrity);
    }
    for (const file of ['LICENSE', 'NOTICE']) expect(readFileSync(join(docsVendorDir, file), 'utf8')).toBe(readFileSync(join(dir, file), 'utf8'));
    // Without a local script (the Deno edge entry), the same page takes both files from the CDN, integrity-checked.
    const res = await docsRoutes({}).request('/docs');
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toContain(`<script src="${SWAGGER_UI_CDN}/swagger-ui-bundle.js" integrity="${SWAGGER_UI_INTEGRITY['swagger-ui-bundle.js']}" crossorigin="anonymous">`);
    expect(html).toContain(`<link rel="stylesheet" href="${SWAGGER_UI_CDN}/swagger-ui.css" integrity="${SWAGGER_UI_INTEGRITY['swagger-ui.css']}"`);
    expect(res.headers.get('content-security-policy')).toContain(`script-src ${new URL(SWAGGER_UI_CDN).origin} 'nonce-`);
    expect((await docsRoutes({}).request('/docs/swagger-ui.js')).status).toBe(404);
  });
});

/**
 * `METHOD /path` items of contract.md's "Auth (auth library, under /api/auth)" and "OAuth 2.1 / OIDC" sections
 * (`GET|POST /x` names both); dynamic registration is left out: it is closed (401), not an operation to call.
 */
function authOperationsNamedBy(text: string): Array<{ method: string; path: string }> {
  const start = text.indexOf('### Auth (auth library');
  const end = text.indexOf('\n### ', text.indexOf('### OAuth 2.1 / OIDC') + 1);
  if (start < 0 || end < 0) return [];
  const found: Array<{ method: string; path: string }> = [];
  for (const m of text.slice(start, end).matchAll(/`((?:GET|POST)(?:\|(?:GET|POST))*) (\/[^\s`?]+)/g)) {
    for (const method of m[1]!.split('|')) found.push({ method, path: m[2]! });
  }
  return found.filter((op) => op.path !== '/api/auth/oauth2/register');
}
