import { createMarketplaceClient } from '@agent-marketplace/client';
import Ajv2020 from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, basicAuth, clientOfAgent, postForm, type TestOAuthClient } from '../support/oauth.ts';
import { signUp } from '../support/users.ts';
import { meteredAgent } from '../metering/support.ts';

/**
 * /openapi.json (and so the SDK's typed client, generated from it) said the token, introspection and revocation
 * endpoints take `application/json` beside the form (functions/auth/openapi.ts formBody: "the library reads JSON too"),
 * and that their 401 is `{ message }` (required). The service answers JSON bodies with 415 (the library allows only
 * forms there), and its 401 is RFC 6749's `{ error, error_description }` (found by review 51). Now the document says
 * what is served, and the typed client posts the form when given its content type.
 */
let t: TestApp;
let doc: any;
let client: TestOAuthClient;
let accessToken: string;
beforeAll(async () => {
  t = await startTestApp();
  doc = (await t.http.get('/openapi.json')).body;
  const agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }]);
  client = await clientOfAgent(t, agent.agentId);
  const user = await signUp(t, { verified: true });
  accessToken = (await accessTokenFor(t, user, { client })).accessToken;
});
afterAll(() => t?.close());

const ENDPOINTS = ['/api/auth/oauth2/token', '/api/auth/oauth2/introspect', '/api/auth/oauth2/revoke'] as const;

describe('/openapi.json: the token-family endpoints as the service serves them (review 51)', () => {
  it('every request content type the document lists for them is accepted (no 415)', async () => {
    const refused: string[] = [];
    for (const path of ENDPOINTS) {
      const listed = Object.keys(doc.paths[path].post.requestBody.content);
      for (const type of listed) {
        const fields: Record<string, string> = path.endsWith('/token') ? { grant_type: 'refresh_token', refresh_token: 'not-a-token' } : { token: accessToken };
        const body = type === 'application/json' ? JSON.stringify(fields) : new URLSearchParams(fields).toString();
        const res = await t.http.post(path, { headers: { 'content-type': type, authorization: basicAuth(client) }, body });
        if (res.status === 415) refused.push(`${path} ${type}: ${res.text}`);
      }
    }
    expect(refused).toEqual([]);
  });

  it("the SDK's typed client calls introspection as the document says, and gets the answer", async () => {
    const api = createMarketplaceClient({ baseUrl: t.baseUrl });
    const { response, data } = await api.POST('/api/auth/oauth2/introspect', {
      body: { token: accessToken },
      headers: { authorization: basicAuth(client), 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(response.status).toBe(200);
    // (a JSON body would be 415; the token itself was revoked by the first test, so the answer is active: false)
    expect(data).toMatchObject({ active: false });
  });

  it('documents Bearer tokens only, with no DPoP header, and a 415 for a body that is not a form', async () => {
    const token = doc.paths['/api/auth/oauth2/token'].post;
    expect((token.parameters ?? []).map((p: { name: string }) => p.name.toLowerCase())).not.toContain('dpop');
    expect(token.responses['200'].content['application/json'].schema.properties.token_type.enum).toEqual(['Bearer']);
    for (const path of ENDPOINTS) expect(doc.paths[path].post.responses['415'].description).toContain('application/x-www-form-urlencoded');
  });

  it('a 401 invalid_client answer fits the 401 schema the document gives', async () => {
    const ajv = new (Ajv2020 as any)({ strict: false, validateFormats: false });
    const mismatches: string[] = [];
    for (const path of ENDPOINTS) {
      const res = await postForm(t, path, { clientId: client.clientId, clientSecret: 'wrong-secret' }, { grant_type: 'refresh_token', refresh_token: 'x', token: 'x' });
      expect(res.status).toBe(401);
      expect(res.body.error).toBe('invalid_client');
      const schema = doc.paths[path].post.responses['401'].content['application/json'].schema;
      if (!ajv.validate(schema, res.body)) mismatches.push(`${path}: ${res.text} vs ${JSON.stringify(schema)}`);
    }
    expect(mismatches).toEqual([]);
  });
});
