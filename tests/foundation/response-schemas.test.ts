import Ajv2020 from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import type { CallResult } from '../support/http.ts';
import { insertAgent } from '../support/fixtures.ts';
import { agentToken, meteredAgent, subscribe } from '../metering/support.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * Answers as /openapi.json describes them: a client generated from it (packages/client is) must be able to read
 * every answer, success and error alike. Each call below is made over HTTP as an integrator would make it, and its
 * answer must have a status the operation lists and a body that fits that status's schema. The docs and the OpenAPI
 * were checked against the service by hand (review 67, which wrote the first version of this walk); this keeps them
 * from drifting apart.
 */
let t: TestApp;
let user: TestUser;
let admin: TestUser;
let doc: any;
const ajv = new (Ajv2020 as any)({ strict: false, allErrors: true, validateFormats: false });

beforeAll(async () => {
  t = await startTestApp();
  user = await signUp(t, { verified: true });
  admin = await createAdmin(t);
  doc = (await t.http.get('/openapi.json')).body;
});
afterAll(() => t?.close());

/** What is wrong with the answer to `method template` by the document, or undefined. */
function mismatch(method: string, template: string, r: CallResult): string | undefined {
  const operation = doc.paths[template]?.[method];
  if (!operation) return `${method.toUpperCase()} ${template}: no such operation in /openapi.json`;
  const response = operation.responses[String(r.status)];
  if (!response) return `${method.toUpperCase()} ${template}: status ${r.status} is not listed (${r.text.slice(0, 200)})`;
  const schema = response.content?.['application/json']?.schema;
  if (!schema) return undefined;
  if (ajv.validate({ ...schema, components: doc.components }, r.body)) return undefined;
  return `${method.toUpperCase()} ${template} ${r.status}: ${JSON.stringify(ajv.errors.slice(0, 4))} in ${r.text.slice(0, 300)}`;
}

describe('answers fit /openapi.json', () => {
  it('the check itself refuses an answer that does not fit (so the walk below can fail)', () => {
    const answer = (status: number, body: unknown): CallResult => ({ status, body, text: JSON.stringify(body), headers: new Headers() });
    expect(mismatch('get', '/agents', answer(200, { status: 'success', data: 42, error: null }))).toMatch(/GET \/agents 200/);
    expect(mismatch('get', '/agents', answer(418, {}))).toMatch(/status 418 is not listed/);
    expect(mismatch('get', '/no-such-path', answer(200, {}))).toMatch(/no such operation/);
  });

  it('every answer of a walk through metering, reservations, /me, the catalog, billing and admin, errors included', async () => {
    const asAdmin = { cookie: admin.cookie, headers: { origin: t.baseUrl } };
    const asUser = { cookie: user.cookie, headers: { origin: t.baseUrl } };
    const problems: string[] = [];
    const check = (method: string, template: string, r: CallResult) => {
      const wrong = mismatch(method, template, r);
      if (wrong) problems.push(wrong);
      return r;
    };

    const a = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 2 }, { slug: 'seats', kind: 'fixed', quota: 3 }]);
    const bearer = await agentToken(t, user, a.agentId);
    const usage = '/me/usage/{agentId}/{metricSlug}';
    const base = `/me/usage/${a.agentId}`;
    // no subscription yet: 402 and 404
    check('post', `${usage}/increment`, await t.http.post(`${base}/calls/increment`, { bearer, json: { clientReqId: 'n1' } }));
    check('get', '/me/usage/{agentId}', await t.http.get(base, { bearer }));
    const sub = await subscribe(t, user.userId, a.tierId);
    check('post', `${usage}/increment`, await t.http.post(`${base}/calls/increment`, { bearer, json: { clientReqId: 'i1', amount: 2 } }));
    // over the quota: 429 with its details
    check('post', `${usage}/increment`, await t.http.post(`${base}/calls/increment`, { bearer, json: { clientReqId: 'i2', amount: 1 } }));
    check('post', `${usage}/increment`, await t.http.post(`${base}/seats/increment`, { bearer, json: { clientReqId: 'i3', amount: 9 } }));
    check('post', `${usage}/decrement`, await t.http.post(`${base}/seats/decrement`, { bearer, json: { amount: 1 } }));
    // a rolling metric cannot be decremented: 422
    check('post', `${usage}/decrement`, await t.http.post(`${base}/calls/decrement`, { bearer, json: { amount: 1 } }));
    check('get', '/me/usage/{agentId}', await t.http.get(base, { bearer }));
    check('get', usage, await t.http.get(`${base}/seats`, { bearer }));

    const held = check('post', `${usage}/reservations`, await t.http.post(`${base}/seats/reservations`, { bearer, json: { clientReqId: 'r1', amount: 1 } }));
    check('post', `${usage}/reservations`, await t.http.post(`${base}/calls/reservations`, { bearer, json: { clientReqId: 'r2', amount: 1 } }));
    const reservation = '/me/usage/{agentId}/reservations/{reservationId}';
    const heldAt = `${base}/reservations/${held.body.data.id}`;
    check('get', reservation, await t.http.get(heldAt, { bearer }));
    // more than held (400), then a commit, a different amount after it (409), a release after it (422)
    check('post', `${reservation}/commit`, await t.http.post(`${heldAt}/commit`, { bearer, json: { amount: 5 } }));
    check('post', `${reservation}/commit`, await t.http.post(`${heldAt}/commit`, { bearer, json: { amount: 1 } }));
    check('post', `${reservation}/commit`, await t.http.post(`${heldAt}/commit`, { bearer, json: { amount: 0 } }));
    check('post', `${reservation}/release`, await t.http.post(`${heldAt}/release`, { bearer }));

    check('get', '/me', await t.http.get('/me', { bearer }));
    check('get', '/me', await t.http.get('/me', { cookie: user.cookie }));
    check('get', '/me/subscriptions', await t.http.get('/me/subscriptions', { cookie: user.cookie }));
    check('get', '/me/subscriptions/{agentId}', await t.http.get(`/me/subscriptions/${a.agentId}`, { bearer }));

    check('get', '/agents', await t.http.get('/agents'));
    check('get', '/agents/{agentId}', await t.http.get(`/agents/${a.agentId}`));
    check('get', '/agents/{agentId}/pricing', await t.http.get(`/agents/${a.agentId}/pricing`));
    check('get', '/agents/{agentId}/metric-definitions', await t.http.get(`/agents/${a.agentId}/metric-definitions`));
    check('get', '/agents/{agentId}/pricing/{tierId}/quotas', await t.http.get(`/agents/${a.agentId}/pricing/${a.tierId}/quotas`));
    check('put', '/agents/{agentId}/reviews', await t.http.put(`/agents/${a.agentId}/reviews`, { bearer, json: { rating: 5, title: 't', body: 'b' } }));
    check('get', '/agents/{agentId}/reviews', await t.http.get(`/agents/${a.agentId}/reviews`, { bearer }));
    check('post', '/agents/{agentId}/install', await t.http.post(`/agents/${a.agentId}/install`, { bearer }));
    check('post', '/agents/{agentId}/demo-requests', await t.http.post(`/agents/${a.agentId}/demo-requests`, { bearer, json: {} }));
    check('get', '/agents/{agentId}/telemetry', await t.http.get(`/agents/${a.agentId}/telemetry`));
    const comingSoon = await insertAgent(t.db, { status: 'coming_soon' });
    check('post', '/agents/{agentId}/waitlist', await t.http.post(`/agents/${comingSoon.id}/waitlist`, { json: { email: 'w@example.com' } }));
    check('get', '/agents/{agentId}/waitlist', await t.http.get(`/agents/${comingSoon.id}/waitlist`, { cookie: user.cookie }));

    check('get', '/admin/subscriptions/{subscriptionId}/ledger', await t.http.get(`/admin/subscriptions/${sub.id}/ledger`, asAdmin));
    check('get', '/admin/subscriptions/{subscriptionId}/usage', await t.http.get(`/admin/subscriptions/${sub.id}/usage`, asAdmin));
    check('post', '/admin/subscriptions/{subscriptionId}/addons', await t.http.post(`/admin/subscriptions/${sub.id}/addons`, { ...asAdmin, json: { metricSlug: 'calls', amount: 2, duration: 'one_cycle' } }));
    check('get', '/admin/subscriptions/{subscriptionId}/addons', await t.http.get(`/admin/subscriptions/${sub.id}/addons`, asAdmin));
    check('get', '/admin/users', await t.http.get('/admin/users', asAdmin));
    check('get', '/admin/users/{userId}', await t.http.get(`/admin/users/${user.userId}`, asAdmin));
    check('get', '/admin/subscriptions', await t.http.get('/admin/subscriptions', asAdmin));
    check('get', '/admin/interactions', await t.http.get('/admin/interactions', asAdmin));
    check('get', '/admin/analytics', await t.http.get('/admin/analytics', asAdmin));
    check('get', '/admin/agents/{agentId}/oauth-client', await t.http.get(`/admin/agents/${a.agentId}/oauth-client`, asAdmin));
    const webhook = check('post', '/admin/agents/{agentId}/webhooks', await t.http.post(`/admin/agents/${a.agentId}/webhooks`, {
      ...asAdmin,
      json: { url: 'https://agent.example.com/h', events: ['usage.threshold_reached', 'subscription.canceled'] },
    }));
    check('get', '/admin/agents/{agentId}/webhooks', await t.http.get(`/admin/agents/${a.agentId}/webhooks`, asAdmin));
    await t.http.post(`${base}/seats/increment`, { bearer, json: { clientReqId: 'i9', amount: 3 } });
    check('get', '/admin/agents/{agentId}/webhooks/{webhookId}/deliveries', await t.http.get(`/admin/agents/${a.agentId}/webhooks/${webhook.body.data.id}/deliveries`, asAdmin));

    check('post', '/me/subscriptions/{agentId}/cancel', await t.http.post(`/me/subscriptions/${a.agentId}/cancel`, asUser));
    check('post', '/me/checkout', await t.http.post('/me/checkout', { ...asUser, json: { tierId: a.tierId } }));
    // the same free tier again: the existing subscription
    check('post', '/me/checkout', await t.http.post('/me/checkout', { ...asUser, json: { tierId: a.tierId } }));
    check('get', '/health', await t.http.get('/health'));
    check('get', '/ready', await t.http.get('/ready'));

    expect(problems).toEqual([]);
  });
});
