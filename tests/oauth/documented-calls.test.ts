import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, authorizeUrl, defaultOAuthClient, followAuthorize, pkcePair, postForm } from '../support/oauth.ts';
import { signUp } from '../support/users.ts';

/**
 * The OAuth operations as /openapi.json documents them are the ones the service serves (contract.md, OAuth 2.1 /
 * OIDC: "`POST /api/auth/oauth2/consent {accept, consent_code}`", "Consent answers ... 200 `{ redirect: true, url }`
 * for a fetch", "`GET /api/auth/oauth2/public-client?client_id=`", introspection per RFC 7662, RP-Initiated Logout).
 * Found by review 11: the document passed the auth library's own descriptions through, so a client generated from it
 * sent the consent as `{ accept, oauth_query }` and was refused, and read a `{ redirect_uri }` answer that never
 * comes. Each test here sends what the document says and reads the answer by the document's names.
 */
let t: TestApp;
let doc: any;
beforeAll(async () => {
  t = await startTestApp();
  doc = (await t.http.get('/openapi.json')).body;
});
afterAll(() => t?.close());

describe('/openapi.json describes the OAuth calls as the service answers them', () => {
  it('consent: a body built from the documented fields is accepted, and the answer has the documented fields', async () => {
    const op = doc.paths['/api/auth/oauth2/consent'].post;
    const schema = op.requestBody.content['application/json'].schema;
    expect(schema.required).toEqual(['accept', 'consent_code']);
    expect(Object.keys(schema.properties)).toEqual(['accept', 'consent_code']);
    const answer = op.responses[200].content['application/json'].schema;
    expect(answer.required).toEqual(['redirect', 'url']);

    const user = await signUp(t, { verified: true });
    const client = await defaultOAuthClient(t);
    const landing = await followAuthorize(t, authorizeUrl(client, { challenge: pkcePair().challenge }), user.cookie);
    expect(landing.pathname).toBe('/consent');
    const body = Object.fromEntries(Object.keys(schema.properties).map((name) => [name, name === 'accept' ? true : landing.searchParams.get(name)]));
    const res = await t.http.post('/api/auth/oauth2/consent', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: body });
    expect(res.status, res.text).toBe(200);
    for (const name of answer.required) expect(res.body[name], name).toBeDefined();
    expect(new URL(res.body.url).searchParams.get('code')).toBeTruthy();
  });

  it('public-client: client_id is required, a session is needed (401 without), and the 200 answer is documented', async () => {
    const op = doc.paths['/api/auth/oauth2/public-client'].get;
    expect(op.parameters).toEqual([expect.objectContaining({ name: 'client_id', in: 'query', required: true })]);
    expect(op.security).toEqual([{ cookieSession: [] }]);
    const client = await defaultOAuthClient(t);
    expect((await t.http.get(`/api/auth/oauth2/public-client?client_id=${client.clientId}`)).status).toBe(401);
    const user = await signUp(t);
    const res = await t.http.get(`/api/auth/oauth2/public-client?client_id=${client.clientId}`, { cookie: user.cookie });
    expect(res.status).toBe(200);
    const answer = op.responses[200].content['application/json'].schema;
    for (const name of Object.keys(res.body)) expect(Object.keys(answer.properties), name).toContain(name);
    expect(res.body.client_id).toBe(client.clientId);
  });

  it("introspection: `aud` is documented as a string or a list, and the service's list fits", async () => {
    const aud = doc.paths['/api/auth/oauth2/introspect'].post.responses[200].content['application/json'].schema.properties.aud;
    expect(aud.oneOf).toEqual([{ type: 'string' }, { type: 'array', items: { type: 'string' } }]);
    const user = await signUp(t, { verified: true });
    const client = await defaultOAuthClient(t);
    const tokens = await accessTokenFor(t, user, { client });
    const res = await postForm(t, '/api/auth/oauth2/introspect', client, { token: tokens.accessToken });
    expect(res.status).toBe(200);
    expect(res.body.active).toBe(true);
    expect(Array.isArray(res.body.aud) && res.body.aud.every((a: unknown) => typeof a === 'string')).toBe(true);
  });

  it('end-session: the logout parameters a client sends are documented', () => {
    const names = doc.paths['/api/auth/oauth2/end-session'].get.parameters.map((p: { name: string }) => p.name);
    expect(names).toEqual(expect.arrayContaining(['id_token_hint', 'post_logout_redirect_uri', 'state']));
  });

  it('consents: the four calls docs/oauth.md gives a front end list the 200 they answer, with the fields it carries', async () => {
    // Review 32: they listed no 200, so a client generated from the document had no type for their answers.
    const user = await signUp(t, { verified: true });
    const client = await defaultOAuthClient(t);
    await accessTokenFor(t, user, { client });
    const op = (path: string, method: string) => doc.paths[`/api/auth/oauth2/${path}`][method];
    const model = doc.components.schemas.AuthOauthConsent;
    const answerOf = (path: string, method: string) => op(path, method).responses[200]?.content?.['application/json']?.schema;
    const withCookie = { cookie: user.cookie, headers: { origin: t.baseUrl } };

    const list = await t.http.get('/api/auth/oauth2/get-consents', withCookie);
    expect(list.status).toBe(200);
    expect(answerOf('get-consents', 'get')).toEqual({ type: 'array', items: { $ref: '#/components/schemas/AuthOauthConsent' } });
    const consent = list.body.find((c: { clientId: string }) => c.clientId === client.clientId);
    for (const name of Object.keys(consent)) expect(Object.keys(model.properties), name).toContain(name);
    for (const name of model.required) expect(consent[name], name).toBeDefined();

    const one = await t.http.get(`/api/auth/oauth2/get-consent?id=${consent.id}`, withCookie);
    expect(one.status).toBe(200);
    expect(answerOf('get-consent', 'get')).toEqual({ $ref: '#/components/schemas/AuthOauthConsent' });
    expect(one.body.id).toBe(consent.id);

    const narrowed = await t.http.post('/api/auth/oauth2/update-consent', { ...withCookie, json: { id: consent.id, update: { scopes: ['openid'] } } });
    expect(narrowed.status).toBe(200);
    expect(answerOf('update-consent', 'post')).toEqual({ $ref: '#/components/schemas/AuthOauthConsent' });
    expect({ id: narrowed.body.id, scopes: narrowed.body.scopes }).toEqual({ id: consent.id, scopes: ['openid'] });

    const withdrawn = await t.http.post('/api/auth/oauth2/delete-consent', { ...withCookie, json: { id: consent.id } });
    expect(withdrawn.status).toBe(200);
    expect(withdrawn.text).toBe('');
    expect(op('delete-consent', 'post').responses[200]).toEqual({ description: expect.any(String) }); // no content
  });

  it("the library's models: a field the model does not require is nullable, as the service answers it", async () => {
    const user = await signUp(t);
    const res = await t.http.get('/api/auth/get-session', { cookie: user.cookie });
    expect(res.status).toBe(200);
    expect([res.body.user.image, res.body.session.activeOrganizationId]).toEqual([null, null]);
    expect(doc.components.schemas.AuthUser.properties.image.type).toEqual(['string', 'null']);
    expect(doc.components.schemas.AuthSession.properties.activeOrganizationId.type).toEqual(['string', 'null']);
    expect(doc.components.schemas.AuthUser.properties.email.type).toBe('string'); // required: never null
  });
});
