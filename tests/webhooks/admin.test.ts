import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertAgent } from '../support/fixtures.ts';
import { accessTokenFor } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { walkPages } from '../support/pages.ts';
import { meteredAgent } from '../metering/support.ts';
import { deliveries, drain, passBackoff, Receiver } from './support.ts';

/**
 * The agent-webhook admin routes over HTTP: who may call them, what they refuse, the secret shown once, pagination
 * and the status filter of deliveries, and the OpenAPI document.
 */

let t: TestApp;
let admin: TestUser;
let user: TestUser;
let agentId: string;
let hook: Receiver;

beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  user = await signUp(t);
  agentId = (await insertAgent(t.db)).id;
  hook = await Receiver.start();
});
afterAll(async () => {
  await hook.close();
  await t.close();
});

const base = (id = agentId) => `/admin/agents/${id}/webhooks`;
const ALL = ['subscription.created', 'subscription.updated', 'subscription.canceled', 'usage.threshold_reached', 'reservation.expired'];

/** A real receiver and an endpoint of the agent pointed at it, listing `events`; the caller closes the receiver. */
async function listeningEndpoint(agent: string, events: string[]) {
  const receiver = await Receiver.start();
  const made = await t.http.post(base(agent), { cookie: admin.cookie, json: { url: receiver.url, events } });
  if (made.status !== 201) {
    await receiver.close();
    throw new Error(`createAgentWebhook answered ${made.status}: ${made.text}`);
  }
  receiver.secrets = [made.body.data.secret];
  return { receiver, webhookId: made.body.data.id as string };
}

async function create(json: unknown = { url: 'https://agent.example.com/hooks', events: ALL }) {
  return t.http.post(base(), { cookie: admin.cookie, json });
}

describe('access', () => {
  it('answers 401 signed out, 403 to a user, 403 to any agent bearer token (even an admin’s), on every route', async () => {
    const made = await create();
    expect(made.status).toBe(201);
    const webhookId = made.body.data.id;
    await sql`insert into public.webhook_events (id, agent_id, type, data, occurred_at)
              values ('00000000-0000-4000-8000-00000000e001', ${agentId}, 'subscription.created', '{}', now())`.execute(t.db);
    await sql`insert into public.webhook_deliveries (id, endpoint_id, event_id, event_seq, status, created_at)
              select public.webhook_delivery_id(now()), ${webhookId}, e.id, e.seq, 'failed', now()
              from public.webhook_events e where e.id = '00000000-0000-4000-8000-00000000e001'`.execute(t.db);
    const deliveryId = (await sql<{ id: string }>`select id from public.webhook_deliveries where endpoint_id = ${webhookId}`.execute(t.db))
      .rows[0]!.id;

    const calls: Array<[string, string, unknown?]> = [
      ['GET', base()],
      ['POST', base(), { url: 'https://x.example.com/h', events: ['subscription.created'] }],
      ['PATCH', `${base()}/${webhookId}`, { enabled: false }],
      ['POST', `${base()}/${webhookId}/rotate-secret`],
      ['GET', `${base()}/${webhookId}/deliveries`],
      ['POST', `/admin/webhook-deliveries/${deliveryId}/redeliver`],
      ['DELETE', `${base()}/${webhookId}`],
    ];
    const agentTokenOfAdmin = (await accessTokenFor(t, admin, { agentId })).accessToken;
    const agentTokenOfUser = (await accessTokenFor(t, user, { agentId })).accessToken;
    for (const [method, path, json] of calls) {
      const anonymous = await t.http.call(method, path, { json });
      expect(anonymous.status, `${method} ${path} signed out`).toBe(401);
      expect(anonymous.body.error.code).toBe('UNAUTHORIZED');
      const asUser = await t.http.call(method, path, { cookie: user.cookie, json });
      expect(asUser.status, `${method} ${path} as a user`).toBe(403);
      for (const bearer of [agentTokenOfAdmin, agentTokenOfUser]) {
        const asAgent = await t.http.call(method, path, { bearer, json });
        expect(asAgent.status, `${method} ${path} with an agent's token`).toBe(403);
        expect(asAgent.body.error.code).toBe('FORBIDDEN');
      }
    }
    // nothing changed
    const after = await t.http.get(`${base()}`, { cookie: admin.cookie });
    expect(after.body.data.find((w: { id: string }) => w.id === webhookId)).toMatchObject({ enabled: true });
    const delivery = await sql<{ status: string }>`select status from public.webhook_deliveries where id = ${deliveryId}`.execute(t.db);
    expect(delivery.rows[0]!.status).toBe('failed');
  });
});

describe('endpoints', () => {
  it('shows the secret once: in the create answer, never in lists or updates, never in the database or the logs in clear', async () => {
    const made = await create({ url: 'https://agent.example.com/once', events: ['subscription.created'] });
    expect(made.status).toBe(201);
    const { secret, id } = made.body.data;
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(made.body.data).toMatchObject({ agentId, url: 'https://agent.example.com/once', events: ['subscription.created'], enabled: true });

    const listed = await t.http.get(base(), { cookie: admin.cookie });
    expect(listed.status).toBe(200);
    expect(listed.text).not.toContain(secret);
    expect(listed.body.data.find((w: { id: string }) => w.id === id)).not.toHaveProperty('secret');
    const patched = await t.http.patch(`${base()}/${id}`, { cookie: admin.cookie, json: { events: ALL } });
    expect(patched.status).toBe(200);
    expect(patched.body.data).not.toHaveProperty('secret');
    expect(patched.body.data.events).toEqual(ALL);

    const stored = await sql<{ secret_encrypted: string }>`select secret_encrypted from public.webhook_endpoints where id = ${id}`.execute(t.db);
    expect(stored.rows[0]!.secret_encrypted).toMatch(/^v1\./);
    expect(stored.rows[0]!.secret_encrypted).not.toContain(secret.slice(6));
    expect(JSON.stringify(t.logs)).not.toContain(secret.slice(6));

    const rotated = await t.http.post(`${base()}/${id}/rotate-secret`, { cookie: admin.cookie });
    expect(rotated.status).toBe(200);
    expect(rotated.body.data.secret).toMatch(/^whsec_/);
    expect(rotated.body.data.secret).not.toBe(secret);
    expect(JSON.stringify(t.logs)).not.toContain(rotated.body.data.secret.slice(6));
  });

  it('refuses bad urls and event lists with 400', async () => {
    const bad: unknown[] = [
      { url: 'http://agent.example.com/hooks', events: ALL }, // plain http off loopback
      { url: 'ftp://agent.example.com/hooks', events: ALL },
      { url: 'not a url', events: ALL },
      { url: 'https://user:pass@agent.example.com/hooks', events: ALL },
      { url: `https://agent.example.com/${'a'.repeat(2100)}`, events: ALL },
      { url: `https://agent.example.com/${'é'.repeat(1900)}`, events: ALL }, // 1,926 typed, 11,426 once percent-encoded (was a 500)
      { url: 'https://agent.example.com/hooks', events: [] },
      { url: 'https://agent.example.com/hooks', events: ['subscription.deleted'] },
      { url: 'https://agent.example.com/hooks', events: ['subscription.created', 'subscription.created'] },
      { url: 'https://agent.example.com/hooks' },
      { events: ALL },
      { url: 'https://agent.example.com/hooks', events: ALL, secret: 'whsec_mine' },
    ];
    for (const json of bad) {
      const res = await create(json);
      expect(res.status, JSON.stringify(json)).toBe(400);
      expect(res.body.error.code).toBe('VALIDATION_ERROR');
    }
    const made = await create();
    const patch = await t.http.patch(`${base()}/${made.body.data.id}`, { cookie: admin.cookie, json: { url: 'http://10.0.0.1/h' } });
    expect(patch.status).toBe(400);
    const long = await t.http.patch(`${base()}/${made.body.data.id}`, { cookie: admin.cookie, json: { url: `https://agent.example.com/${'é'.repeat(1900)}` } });
    expect([long.status, long.body.error?.details?.issues?.[0]?.path]).toEqual([400, 'url']);
    // loopback http is fine (a backend on the same machine)
    for (const url of ['http://127.0.0.1:8080/h', 'http://localhost/h', 'http://[::1]:9/h']) {
      expect((await create({ url, events: ALL })).status, url).toBe(201);
    }
  });

  it('keeps a url as deliveries will read it: a lookalike host in punycode, a backslash as the path it is', async () => {
    // Found by a review: the url was kept as typed, so the admin page showed a Cyrillic lookalike of a known domain
    // as the domain, and `http://127.0.0.1\@evil.example/` as an address at evil.example while deliveries went to
    // 127.0.0.1.
    const cases: Array<[string, string]> = [
      ['https://аgent.example.com/hooks', 'https://xn--gent-43d.example.com/hooks'],
      ['http://127.0.0.1\\@evil.example/', 'http://127.0.0.1/@evil.example/'],
      ['HTTPS://Agent.Example.COM:443/Hooks', 'https://agent.example.com/Hooks'],
    ];
    for (const [typed, kept] of cases) {
      const made = await create({ url: typed, events: ALL });
      expect([made.status, made.body.data.url]).toEqual([201, kept]);
      const listed = (await t.http.get(base(), { cookie: admin.cookie })).body.data.find((w: any) => w.id === made.body.data.id);
      expect(listed.url).toBe(kept);
      const patched = await t.http.patch(`${base()}/${made.body.data.id}`, { cookie: admin.cookie, json: { url: typed } });
      expect([patched.status, patched.body.data.url]).toEqual([200, kept]);
    }
  });

  it('answers 404 for unknown agents, webhooks and deliveries, and for another agent’s webhook', async () => {
    const unknown = '00000000-0000-4000-8000-000000000000';
    expect((await t.http.get(base(unknown), { cookie: admin.cookie })).status).toBe(404);
    expect((await t.http.post(base(unknown), { cookie: admin.cookie, json: { url: 'https://a.example.com/h', events: ALL } })).status).toBe(404);
    const made = await create();
    const other = (await insertAgent(t.db)).id;
    for (const path of [`${base(other)}/${made.body.data.id}`, `${base()}/${unknown}`]) {
      expect((await t.http.patch(path, { cookie: admin.cookie, json: { enabled: false } })).status).toBe(404);
      expect((await t.http.post(`${path}/rotate-secret`, { cookie: admin.cookie })).status).toBe(404);
      expect((await t.http.get(`${path}/deliveries`, { cookie: admin.cookie })).status).toBe(404);
      expect((await t.http.call('DELETE', path, { cookie: admin.cookie })).status).toBe(404);
    }
    const redeliver = await t.http.post(`/admin/webhook-deliveries/${unknown}/redeliver`, { cookie: admin.cookie });
    expect(redeliver.status).toBe(404);
    expect(redeliver.body.error.code).toBe('NOT_FOUND');
    expect((await t.http.get(`${base('not-a-uuid')}`, { cookie: admin.cookie })).status).toBe(400);
    expect((await t.http.post(`/admin/webhook-deliveries/nope/redeliver`, { cookie: admin.cookie })).status).toBe(400);

    const deleted = await t.http.call('DELETE', `${base()}/${made.body.data.id}`, { cookie: admin.cookie });
    expect(deleted.status).toBe(200);
    expect(deleted.body.data).toEqual({ id: made.body.data.id });
    expect((await t.http.call('DELETE', `${base()}/${made.body.data.id}`, { cookie: admin.cookie })).status).toBe(404);
  });
});

describe('deliveries', () => {
  it('lists newest first in signed pages, filters by status, and refuses another list’s cursor', async () => {
    const agent = await meteredAgent(t.db, []);
    const made = await t.http.post(base(agent.agentId), {
      cookie: admin.cookie,
      json: { url: hook.url, events: ['subscription.created', 'subscription.canceled'] },
    });
    hook.secrets = [made.body.data.secret];
    const webhookId = made.body.data.id;
    const subscriptionIds: string[] = [];
    for (let i = 0; i < 5; i++) {
      const u = await signUp(t);
      const res = await t.http.post('/me/checkout', { cookie: u.cookie, json: { tierId: agent.tierId } });
      subscriptionIds.push(res.body.data.subscription.id);
    }
    // the first two are delivered; the receiver then fails the third, which blocks the rest
    hook.mode = { status: 200 };
    await drain(t, { limit: 2 });
    hook.mode = { status: 500 };
    await drain(t, { limit: 1 });

    const path = `${base(agent.agentId)}/${webhookId}/deliveries`;
    const { items: seen } = await walkPages<Record<string, any>>(t, path, { limit: 2, cookie: admin.cookie, maxPages: 4 });
    expect(seen.map((d) => d.payload.data.id)).toEqual([...subscriptionIds].reverse());
    expect(seen.map((d) => d.status)).toEqual(['pending', 'pending', 'pending', 'delivered', 'delivered']);
    expect(seen[2]).toMatchObject({ attempts: 1, lastStatusCode: 500 });
    expect(seen[0]).toMatchObject({ webhookId, eventType: 'subscription.created', attempts: 0, attemptLog: [] });

    const pending = await t.http.get(`${path}?status=pending`, { cookie: admin.cookie });
    expect(pending.body.data).toHaveLength(3);
    const delivered = await t.http.get(`${path}?status=delivered&limit=1`, { cookie: admin.cookie });
    expect(delivered.body.data).toHaveLength(1);
    // a cursor of the filtered list is not valid for the unfiltered one
    const wrong = await t.http.get(`${path}?cursor=${encodeURIComponent(delivered.body.pagination.cursor)}`, { cookie: admin.cookie });
    expect(wrong.status).toBe(400);
    expect(wrong.body.error.code).toBe('INVALID_CURSOR');
    expect((await t.http.get(`${path}?status=lost`, { cookie: admin.cookie })).status).toBe(400);
    expect((await t.http.get(`${path}?limit=0`, { cookie: admin.cookie })).status).toBe(400);

    // a pending delivery cannot be redelivered; a delivered one can
    expect((await t.http.post(`/admin/webhook-deliveries/${seen[0]!.id}/redeliver`, { cookie: admin.cookie })).status).toBe(422);
    const again = await t.http.post(`/admin/webhook-deliveries/${seen[4]!.id}/redeliver`, { cookie: admin.cookie });
    expect(again.status).toBe(200);
    expect(again.body.data).toMatchObject({ id: seen[4]!.id, status: 'pending', attempts: 0 });
  });

  it('a type taken off an endpoint is not sent to it any more: its pending deliveries end unsent, the rest go', async () => {
    // Found by a review: the backlog of a failing endpoint (up to a day or two of events, rule 23) still went out
    // after the admin narrowed its events, though "an endpoint gets only the types it lists".
    const agent = await meteredAgent(t.db, []);
    const { receiver, webhookId } = await listeningEndpoint(agent.agentId, ['subscription.created', 'subscription.canceled']);
    try {
      receiver.mode = { status: 503 };
      const u = await signUp(t);
      expect((await t.http.post('/me/checkout', { cookie: u.cookie, json: { tierId: agent.tierId } })).status).toBe(201);
      expect((await t.http.post(`/me/subscriptions/${agent.agentId}/cancel`, { cookie: u.cookie })).status).toBe(200);
      expect(await drain(t, { limit: 1 })).toMatchObject({ attempted: 1, retrying: 1 });

      const narrowed = await t.http.patch(`${base(agent.agentId)}/${webhookId}`, { cookie: admin.cookie, json: { events: ['subscription.canceled'] } });
      expect([narrowed.status, narrowed.body.data.events]).toEqual([200, ['subscription.canceled']]);
      const after = await t.http.get(`${base(agent.agentId)}/${webhookId}/deliveries`, { cookie: admin.cookie });
      expect(after.body.data.map((d: any) => [d.eventType, d.status, d.lastError])).toEqual([
        ['subscription.canceled', 'pending', null],
        ['subscription.created', 'failed', 'not sent: its event type was taken off the endpoint before it went out'],
      ]);

      receiver.mode = { status: 204 };
      await passBackoff(t, webhookId);
      await drain(t);
      expect(receiver.accepted().map((p) => p.type)).toEqual(['subscription.canceled']);
      // Redelivering one whose type the endpoint does not list is refused (the drain would end it unsent again: review 31)
      const unlisted = after.body.data[1];
      const refused = await t.http.post(`/admin/webhook-deliveries/${unlisted.id}/redeliver`, { cookie: admin.cookie });
      expect([refused.status, refused.body.error?.code, refused.body.error?.details?.reason]).toEqual([422, 'INVALID_STATE', 'type_not_listed']);
      // Listing the type again brings back nothing of before; an admin may then redeliver one by id, and it is sent.
      await t.http.patch(`${base(agent.agentId)}/${webhookId}`, { cookie: admin.cookie, json: { events: ['subscription.created', 'subscription.canceled'] } });
      await drain(t);
      expect(receiver.accepted().map((p) => p.type)).toEqual(['subscription.canceled']);
      const again = await t.http.post(`/admin/webhook-deliveries/${unlisted.id}/redeliver`, { cookie: admin.cookie });
      expect([again.status, again.body.data?.status]).toEqual([200, 'pending']);
      await drain(t);
      expect(receiver.accepted().map((p) => p.type)).toEqual(['subscription.canceled', 'subscription.created']);
    } finally {
      t.clock.set(new Date());
      await receiver.close();
    }
  });

  it('a delivery in flight when its type is taken off is not tried again after that attempt fails', async () => {
    // Found by a review of the rule above: "one in flight goes as it is", but a failed attempt went back to pending
    // and was retried for up to 72 hours, so the type taken off was delivered later all the same.
    const agent = await meteredAgent(t.db, []);
    const { receiver, webhookId } = await listeningEndpoint(agent.agentId, ['subscription.created', 'subscription.canceled']);
    try {
      const u = await signUp(t);
      expect((await t.http.post('/me/checkout', { cookie: u.cookie, json: { tierId: agent.tierId } })).status).toBe(201);
      receiver.mode = 'hang';
      const draining = drain(t);
      await receiver.arrived(1); // subscription.created is in flight
      const narrowed = await t.http.patch(`${base(agent.agentId)}/${webhookId}`, { cookie: admin.cookie, json: { events: ['subscription.canceled'] } });
      expect(narrowed.status).toBe(200);
      receiver.release(503);
      await draining;
      receiver.mode = { status: 204 };
      await passBackoff(t, webhookId);
      await drain(t);
      const listed = await deliveries(t, admin, agent.agentId, webhookId);
      expect(listed.map((d) => [d.eventType, d.status])).toEqual([['subscription.created', 'failed']]);
      expect(receiver.accepted()).toEqual([]);
    } finally {
      t.clock.set(new Date());
      await receiver.close();
    }
  });

  it('a pending delivery of a type its endpoint no longer lists is never sent: the drain ends it unsent, the ones behind it go', async () => {
    // Review 16: a change that commits while the PATCH runs writes a delivery the PATCH cannot see (the race itself:
    // endpoint-changes-in-flight.pg-only.test.ts). Here the list is changed under the PATCH's step, as that race
    // leaves it: the drain, not the PATCH, is what keeps such a delivery from going out.
    const agent = await meteredAgent(t.db, []);
    const { receiver, webhookId } = await listeningEndpoint(agent.agentId, ['subscription.created', 'subscription.canceled']);
    try {
      for (let i = 0; i < 2; i++) {
        const u = await signUp(t);
        expect((await t.http.post('/me/checkout', { cookie: u.cookie, json: { tierId: agent.tierId } })).status).toBe(201);
        expect((await t.http.post(`/me/subscriptions/${agent.agentId}/cancel`, { cookie: u.cookie })).status).toBe(200);
      }
      await sql`update public.webhook_endpoints set events = array['subscription.canceled'] where id = ${webhookId}`.execute(t.db);

      expect(await drain(t)).toMatchObject({ delivered: 2, failed: 2 });
      expect(receiver.accepted().map((p) => p.type)).toEqual(['subscription.canceled', 'subscription.canceled']);
      const listed = await deliveries(t, admin, agent.agentId, webhookId);
      expect(listed.map((d) => [d.eventType, d.status, d.attempts, d.lastError]).reverse()).toEqual([
        ['subscription.created', 'failed', 0, 'not sent: its event type was taken off the endpoint before it went out'],
        ['subscription.canceled', 'delivered', 1, null],
        ['subscription.created', 'failed', 0, 'not sent: its event type was taken off the endpoint before it went out'],
        ['subscription.canceled', 'delivered', 1, null],
      ]);
      // one of a type still listed may be redelivered; one of the type taken off only once it is listed again
      const again = await t.http.post(`/admin/webhook-deliveries/${listed[0]!.id}/redeliver`, { cookie: admin.cookie });
      expect(again.status, again.text).toBe(200);
      const unlisted = await t.http.post(`/admin/webhook-deliveries/${listed.at(-1)!.id}/redeliver`, { cookie: admin.cookie });
      expect([unlisted.status, unlisted.body.error?.details?.reason]).toEqual([422, 'type_not_listed']);
    } finally {
      t.clock.set(new Date());
      await receiver.close();
    }
  });
});

describe('OpenAPI', () => {
  it('documents the secret-bearing create as 201 (operations, methods and paths: tests/foundation/operations.test.ts)', async () => {
    const doc = (await t.http.get('/openapi.json')).body;
    expect(doc.paths['/admin/agents/{agentId}/webhooks'].post.responses['201']).toBeDefined();
  });
});
