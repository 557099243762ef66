import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, defaultOAuthClient, postForm } from '../support/oauth.ts';
import { signUp } from '../support/users.ts';

/**
 * The SDK's typed surface (packages/client/src/schema.d.ts, generated from /openapi.json) must describe the
 * answers an agent backend handles. The 429s of the auth endpoints an integrator calls were documented with the auth
 * library's generic `{ message? }`, but the service answers something else: the token endpoint's refresh and
 * code-exchange allowances answer RFC 6749 `{ error, error_description }` (docs/oauth.md, "At most 60 refreshes"),
 * and sign-in, sign-up and password reset answer the envelope's 429 RATE_LIMITED (docs/errors.md). A client
 * generated from the document (createMarketplaceClient) cannot read `error` / `error_description` / `error.code`
 * of those answers: its type had only `message`, which the service never sends (review 86). Each test checks that
 * every top-level key of a real 429 is one the documented schema declares.
 */

let t: TestApp;
let doc: any;
beforeAll(async () => {
  t = await startTestApp({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '2', AUTH_FAILED_SIGNINS_PER_ACCOUNT: '0' } });
  doc = (await t.http.get('/openapi.json')).body;
});
afterAll(() => t?.close());

/** The body's top-level fields the documented schema of (path, method, status) does not declare. */
function undeclared(path: string, method: string, status: string, body: Record<string, unknown>): string[] {
  let schema = doc.paths[path][method].responses[status]?.content?.['application/json']?.schema;
  if (!schema) return [`<no ${status} documented>`];
  while (schema.$ref) schema = doc.components.schemas[schema.$ref.split('/').pop()];
  const declared = new Set(Object.keys(schema.properties ?? {}));
  return Object.keys(body).filter((k) => !declared.has(k));
}

describe("the auth endpoints' 429 answers as /openapi.json (and so the SDK's types) describe them", () => {
  it('token endpoint: the 61st refresh of a grant in an hour answers { error, error_description }, which the document declares', async () => {
    const client = await defaultOAuthClient(t);
    const user = await signUp(t);
    let { refreshToken } = await accessTokenFor(t, user, { client });
    let refused: Awaited<ReturnType<typeof postForm>> | undefined;
    for (let i = 0; i < 61 && !refused; i++) {
      const res = await postForm(t, '/api/auth/oauth2/token', client, { grant_type: 'refresh_token', refresh_token: refreshToken });
      if (res.status === 200) refreshToken = res.body.refresh_token;
      else refused = res;
    }
    expect(refused?.status).toBe(429);
    expect(refused!.body).toEqual({ error: 'invalid_request', error_description: expect.any(String) });
    expect(undeclared('/api/auth/oauth2/token', 'post', '429', refused!.body)).toEqual([]);
  });

  it('sign-in over AUTH_RATE_LIMIT_PER_MINUTE answers the envelope 429 RATE_LIMITED, which the document declares', async () => {
    let res;
    for (let i = 0; i < 3; i++) res = await t.http.post('/api/auth/sign-in/email', { json: { email: 'nobody@example.test', password: 'wrong-password-1' } });
    expect(res!.status).toBe(429);
    expect(res!.body).toMatchObject({ status: 'error', data: null, error: { code: 'RATE_LIMITED' } });
    expect(undeclared('/api/auth/sign-in/email', 'post', '429', res!.body)).toEqual([]);
  });
});
