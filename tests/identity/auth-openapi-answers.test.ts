import Ajv2020 from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { authorizeUrl, createOAuthClient, pkcePair } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * The auth library's half of /openapi.json says what its operations answer (review 77): a client generated from the
 * document (packages/client) had no type for answers it gets, and a wrong one for others. Each case makes the call
 * and checks that its status is listed and its body fits the schema listed for it.
 */
let t: TestApp;
let user: TestUser;
let doc: any;
const ajv = new (Ajv2020 as any)({ strict: false, allErrors: true, validateFormats: false });
beforeAll(async () => {
  t = await startTestApp();
  user = await signUp(t, { verified: true });
  doc = (await t.http.get('/openapi.json')).body;
});
afterAll(() => t?.close());

const asUser = () => ({ cookie: user.cookie, headers: { origin: t.baseUrl } });

/** The answer's status is listed for the operation, and a JSON body fits the schema listed with it. */
function documented(method: 'get' | 'post', path: string, res: { status: number; body: unknown; text: string }) {
  const answer = doc.paths[path]?.[method]?.responses?.[String(res.status)];
  expect(answer, `${method.toUpperCase()} ${path} answered ${res.status} ${res.text.slice(0, 200)}`).toBeDefined();
  const schema = answer.content?.['application/json']?.schema;
  if (schema) {
    const fits = ajv.validate({ ...schema, components: doc.components }, res.body);
    expect(fits, `${method.toUpperCase()} ${path} ${res.status} ${res.text.slice(0, 300)}: ${JSON.stringify(ajv.errors)}`).toBe(true);
  }
}

describe("the auth library's answers as /openapi.json documents them", () => {
  it('POST get-session, which answers 405 to everyone here, is not offered; GET get-session is', async () => {
    expect((await t.http.post('/api/auth/get-session', { ...asUser(), json: {} })).status).toBe(405);
    expect(doc.paths['/api/auth/get-session'].post).toBeUndefined();
    documented('get', '/api/auth/get-session', await t.http.get('/api/auth/get-session', { cookie: user.cookie }));
  });

  it("authorize from fetch: 200 { redirect, url }, by GET and POST", async () => {
    const client = await createOAuthClient(t);
    const url = authorizeUrl(client, { challenge: pkcePair().challenge });
    const res = await t.http.get(url, { cookie: user.cookie });
    expect(res.body).toMatchObject({ redirect: true });
    documented('get', '/api/auth/oauth2/authorize', res);
    expect(doc.paths['/api/auth/oauth2/authorize'].post.responses['200']).toEqual(doc.paths['/api/auth/oauth2/authorize'].get.responses['200']);
    // a first authorization's 302 goes to the consent page, not the client (review 84: the library says only "client")
    expect(res.body.url).toContain('/consent?consent_code=');
    for (const method of ['get', 'post']) expect(doc.paths['/api/auth/oauth2/authorize'][method].responses['302'].description).toMatch(/consent page/);
  });

  it("the reset mail's link with a dead token: 302", async () => {
    const res = await t.http.get(`/api/auth/reset-password/not-a-token?callbackURL=${encodeURIComponent('/reset-password')}`);
    expect(res.status).toBe(302);
    documented('get', '/api/auth/reset-password/{token}', res);
  });

  it('organization create (metadata as an object), reads with no active organization (null), has-permission, delete', async () => {
    const created = await t.http.post('/api/auth/organization/create', { ...asUser(), json: { name: 'Acme', slug: `acme-${Date.now()}`, metadata: { plan: 'x' } } });
    expect(created.body.metadata).toEqual({ plan: 'x' });
    documented('post', '/api/auth/organization/create', created);
    const fresh = await signUp(t, { verified: true });
    for (const path of ['/api/auth/organization/get-full-organization', '/api/auth/organization/get-organization']) {
      const res = await t.http.get(path, { cookie: fresh.cookie });
      expect([path, res.status, res.body]).toEqual([path, 200, null]);
      documented('get', path, res);
    }
    documented('post', '/api/auth/admin/has-permission', await t.http.post('/api/auth/admin/has-permission', { ...asUser(), json: { permissions: { user: ['list'] } } }));
    const has = await t.http.post('/api/auth/organization/has-permission', { ...asUser(), json: { organizationId: created.body.id, permissions: { member: ['create'] } } });
    expect(has.body).toMatchObject({ error: null, success: true });
    documented('post', '/api/auth/organization/has-permission', has);
    const deleted = await t.http.post('/api/auth/organization/delete', { ...asUser(), json: { organizationId: created.body.id } });
    expect(deleted.body).toMatchObject({ id: created.body.id });
    documented('post', '/api/auth/organization/delete', deleted);
  });
});
