import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { insertAgent, insertTier } from '../support/fixtures.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { agentBody, createAgent, expectError, walk } from './helpers.ts';

let t: TestApp;
let admin: TestUser;
let user: TestUser;

beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  user = await signUp(t);
});
afterAll(() => t.close());

const SLIM_KEYS = ['averageRating', 'createdAt', 'description', 'id', 'installs', 'name', 'reviewCount', 'slug', 'status', 'tags', 'updatedAt'];
const FULL_KEYS = [...SLIM_KEYS, 'capabilities', 'changelog', 'longDescription', 'steps'].sort();

describe('POST /agents (createAgent)', () => {
  it('creates the agent with tags, capabilities and steps, and returns its OAuth client secret once', async () => {
    const body = agentBody({
      longDescription: 'All the details',
      tags: ['Customer Support', 'ai'],
      capabilities: [{ title: 'Answers tickets', description: 'From the inbox' }, { title: 'Escalates' }],
      steps: [{ title: 'Connect your inbox' }, { title: 'Approve replies' }],
      postLogoutRedirectUris: ['https://agent.example.com/bye'],
    });
    const res = await t.http.post('/agents', { cookie: admin.cookie, json: body });
    expect(res.status).toBe(201);
    const agent = res.body.data;
    expect(Object.keys(agent).sort()).toEqual([...FULL_KEYS, 'oauthClient'].sort());
    expect(agent).toMatchObject({
      slug: body.slug,
      name: body.name,
      status: 'active',
      longDescription: 'All the details',
      installs: 0,
      reviewCount: 0,
      averageRating: null,
      changelog: [],
    });
    expect(agent.tags.map((x: any) => x.slug)).toEqual(['ai', 'customer-support']);
    expect(agent.capabilities.map((c: any) => [c.position, c.title, c.description])).toEqual([
      [1, 'Answers tickets', 'From the inbox'],
      [2, 'Escalates', ''],
    ]);
    expect(agent.steps.map((s: any) => s.title)).toEqual(['Connect your inbox', 'Approve replies']);
    expect(agent.oauthClient.clientId).toEqual(expect.any(String));
    expect(agent.oauthClient.clientSecret.length).toBeGreaterThanOrEqual(32);

    // The secret is never shown again.
    const again = await t.http.get(`/agents/${agent.id}`);
    expect(again.body.data.oauthClient).toBeUndefined();
    expect(again.text).not.toContain(agent.oauthClient.clientSecret);
    const client = await t.http.get(`/admin/agents/${agent.id}/oauth-client`, { cookie: admin.cookie });
    expect(client.status).toBe(200);
    expect(client.body.data).toMatchObject({ clientId: agent.oauthClient.clientId, redirectUris: body.redirectUris });
    expect(client.text).not.toContain(agent.oauthClient.clientSecret);
  });

  it('defaults to draft', async () => {
    const { status, ...body } = agentBody();
    const res = await t.http.post('/agents', { cookie: admin.cookie, json: body });
    expect(res.status).toBe(201);
    expect(res.body.data.status).toBe('draft');
  });

  it('refuses anonymous callers (401 with sign-in links) and non-admins (403)', async () => {
    const anon = await t.http.post('/agents', { json: agentBody() });
    expectError(anon, 401, 'UNAUTHORIZED');
    expect(anon.body.error.details).toMatchObject({ signInUrl: expect.any(String), signUpUrl: expect.any(String) });
    expectError(await t.http.post('/agents', { cookie: user.cookie, json: agentBody() }), 403, 'FORBIDDEN');
  });

  it('answers 409 on a duplicate slug and creates nothing', async () => {
    const first = await createAgent(t, admin);
    const res = await t.http.post('/agents', { cookie: admin.cookie, json: agentBody({ slug: first.slug }) });
    expectError(res, 409, 'CONFLICT');
    const count = await rows<{ n: number }>(t.db, sql`select count(*)::int as n from agents where slug = ${first.slug}`);
    expect(count[0]!.n).toBe(1);
  });

  it.each([
    ['no redirect URI', { redirectUris: [] }, 'redirectUris'],
    ['a non-https redirect URI', { redirectUris: ['http://agent.example.com/cb'] }, 'redirectUris.0'],
    ['a bad slug', { slug: 'Not A Slug' }, 'slug'],
    ['an unknown status', { status: 'published' }, 'status'],
    ['a capability without title', { capabilities: [{ description: 'x' }] }, 'capabilities.0.title'],
  ])('answers 400 for %s and creates nothing', async (_name, override, path) => {
    const body = agentBody(override);
    const res = await t.http.post('/agents', { cookie: admin.cookie, json: body });
    expectError(res, 400, 'VALIDATION_ERROR');
    expect(res.body.error.details.issues.map((i: any) => i.path)).toContain(path);
    if (typeof body.slug === 'string') {
      const found = await rows(t.db, sql`select 1 from agents where slug = ${body.slug}`);
      expect(found).toHaveLength(0);
    }
  });

  it('answers 400 when redirectUris is missing', async () => {
    const { redirectUris, ...body } = agentBody();
    expectError(await t.http.post('/agents', { cookie: admin.cookie, json: body }), 400, 'VALIDATION_ERROR');
  });

  it('answers 415 for a non-JSON body', async () => {
    const res = await t.http.post('/agents', { cookie: admin.cookie, body: 'slug=x', headers: { 'content-type': 'text/plain' } });
    expect(res.status).toBe(415);
  });
});

describe('GET /agents/{agentId} and /agents/by-slug/{slug}', () => {
  it('returns the full DTO by id and by slug', async () => {
    const created = await createAgent(t, admin, { capabilities: [{ title: 'One' }], steps: [{ title: 'Step one' }] });
    const byId = await t.http.get(`/agents/${created.id}`);
    expect(byId.status).toBe(200);
    expect(Object.keys(byId.body.data).sort()).toEqual(FULL_KEYS);
    const bySlug = await t.http.get(`/agents/by-slug/${created.slug}`);
    expect(bySlug.status).toBe(200);
    expect(bySlug.body.data).toEqual(byId.body.data);
  });

  it('answers 404 for unknown ids and slugs, 400 for a malformed id', async () => {
    expectError(await t.http.get('/agents/6f1d3f8e-5b0e-4c1a-9f51-9a0a3c1f2b7d'), 404, 'NOT_FOUND');
    expectError(await t.http.get('/agents/by-slug/no-such-agent'), 404, 'NOT_FOUND');
    expectError(await t.http.get('/agents/not-a-uuid'), 400, 'VALIDATION_ERROR');
  });

  it('hides draft and inactive agents from everyone but admins', async () => {
    for (const status of ['draft', 'inactive'] as const) {
      const agent = await insertAgent(t.db, { status });
      expectError(await t.http.get(`/agents/${agent.id}`), 404, 'NOT_FOUND');
      expectError(await t.http.get(`/agents/by-slug/${agent.slug}`, { cookie: user.cookie }), 404, 'NOT_FOUND');
      const asAdmin = await t.http.get(`/agents/${agent.id}`, { cookie: admin.cookie });
      expect(asAdmin.status).toBe(200);
      expect(asAdmin.body.data.status).toBe(status);
    }
  });

  it('treats a stale session cookie on public reads as a signed-out visitor, and as 401 on writes', async () => {
    const agent = await createAgent(t, admin);
    const stale = await signUp(t);
    await t.http.post('/api/auth/sign-out', { cookie: stale.cookie, headers: { origin: t.baseUrl } });
    expectError(await t.http.get('/me', { cookie: stale.cookie }), 401, 'UNAUTHORIZED');
    expect((await t.http.get('/agents', { cookie: stale.cookie })).status).toBe(200);
    expect((await t.http.get(`/agents/${agent.id}`, { cookie: stale.cookie })).status).toBe(200);
    expect((await t.http.get(`/agents/${agent.id}/waitlist`, { cookie: stale.cookie })).body.data).toEqual({ notified: false });
    expectError(await t.http.post(`/agents/${agent.id}/install`, { cookie: stale.cookie }), 401, 'UNAUTHORIZED');
  });

  it('shows coming-soon agents to everyone', async () => {
    const agent = await insertAgent(t.db, { status: 'coming_soon' });
    const res = await t.http.get(`/agents/${agent.id}`);
    expect(res.status).toBe(200);
    expect(res.body.data.status).toBe('coming_soon');
  });
});

describe('GET /agents (listAgents)', () => {
  let fresh: TestApp;
  let freshAdmin: TestUser;
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    // A database of its own, so the list holds exactly the agents made here.
    fresh = await startTestApp();
    freshAdmin = await createAdmin(fresh);
    const make = (overrides: Record<string, unknown>) => createAgent(fresh, freshAdmin, overrides);
    ids.support = (await make({ name: 'Support Copilot', description: 'Answers customer tickets', tags: ['support'] })).id;
    ids.sales = (await make({ name: 'Sales Scout', description: 'Finds leads for your pipeline', tags: ['sales'] })).id;
    ids.soon = (await make({ name: 'Invoice Bot', description: 'Reads invoices', status: 'coming_soon', tags: ['finance'] })).id;
    ids.draft = (await make({ name: 'Draft Thing', description: 'Not ready', status: 'draft', tags: ['support'] })).id;
    ids.gone = (await make({ name: 'Old Support', description: 'Retired ticket helper', tags: ['support'] })).id;
    for (let i = 0; i < 7; i++) ids[`filler${i}`] = (await make({ name: `Filler ${i}`, description: 'Generic helper' })).id;
    await fresh.http.delete(`/agents/${ids.gone}`, { cookie: freshAdmin.cookie });
    await insertTier(fresh.db, ids.support!, { priceCents: 0, name: 'Free' });
    await insertTier(fresh.db, ids.support!, { priceCents: 1900, name: 'Pro' });
    await insertTier(fresh.db, ids.sales!, { priceCents: 4900, name: 'Team' });
    await insertTier(fresh.db, ids.soon!, { priceCents: 0, name: 'Hidden free', isPublic: false });
  });
  afterAll(() => fresh.close());

  it('returns slim DTOs, newest first', async () => {
    const res = await fresh.http.get('/agents?limit=100');
    expect(res.status).toBe(200);
    for (const item of res.body.data) expect(Object.keys(item).sort()).toEqual(SLIM_KEYS);
    const created = res.body.data.map((a: any) => a.createdAt + a.id);
    expect([...created].sort().reverse()).toEqual(created);
    expect(res.body.pagination).toEqual({ cursor: expect.any(String), hasMore: false, limit: 100 });
  });

  it('walks every published agent exactly once, page by page; draft and inactive are left out for the public', async () => {
    const items = await walk(fresh, '/agents', { limit: 3 });
    const seen = items.map((a) => a.id);
    expect(new Set(seen).size).toBe(seen.length);
    const expected = Object.entries(ids)
      .filter(([k]) => k !== 'draft' && k !== 'gone')
      .map(([, id]) => id);
    expect(seen.sort()).toEqual(expected.sort());
  });

  it('shows admins every agent, inactive included, and filters by status', async () => {
    const all = await walk(fresh, '/agents', { limit: 4, cookie: freshAdmin.cookie });
    expect(all.map((a) => a.id).sort()).toEqual(Object.values(ids).sort());
    const inactive = await fresh.http.get('/agents?status=inactive', { cookie: freshAdmin.cookie });
    expect(inactive.body.data.map((a: any) => a.id)).toEqual([ids.gone]);
    // The public asking for hidden statuses gets nothing.
    expect((await fresh.http.get('/agents?status=draft')).body.data).toEqual([]);
    expect((await fresh.http.get('/agents?status=coming_soon')).body.data.map((a: any) => a.id)).toEqual([ids.soon]);
  });

  it('filters by tag, with pagination staying inside the filter', async () => {
    const support = await walk(fresh, '/agents?tag=support', { limit: 1 });
    expect(support.map((a) => a.id)).toEqual([ids.support]);
    const supportAdmin = await walk(fresh, '/agents?tag=support', { limit: 1, cookie: freshAdmin.cookie });
    expect(supportAdmin.map((a) => a.id).sort()).toEqual([ids.support, ids.draft, ids.gone].sort());
  });

  it('searches name and description with full-text search', async () => {
    const tickets = await fresh.http.get('/agents?q=tickets');
    expect(tickets.body.data.map((a: any) => a.id)).toEqual([ids.support]);
    const leads = await fresh.http.get(`/agents?q=${encodeURIComponent('sales leads')}`);
    expect(leads.body.data.map((a: any) => a.id)).toEqual([ids.sales]);
    const generic = await walk(fresh, '/agents?q=generic', { limit: 2 });
    expect(generic).toHaveLength(7);
    expect((await fresh.http.get('/agents?q=nothingmatchesthis')).body.data).toEqual([]);
    // Any text is a valid search (websearch syntax never fails to parse): operators and quotes are not a 500.
    for (const q of ["a:* & | ! ( ) <-> '\\", '"unterminated', '-', 'or or']) {
      expect((await fresh.http.get(`/agents?q=${encodeURIComponent(q)}`)).status).toBe(200);
    }
    expect((await fresh.http.get(`/agents?q=${encodeURIComponent('-tickets customer')}`)).body.data).toEqual([]);
    // A search form's blank fields are no filter (review 112: 400), and the page's cursor is the unfiltered list's.
    const blank = await fresh.http.get('/agents?q=&tag=&status=&pricing=&limit=2');
    const none = await fresh.http.get('/agents?limit=2');
    expect([blank.status, blank.body.data, blank.body.pagination]).toEqual([200, none.body.data, none.body.pagination]);
  });

  it('filters by pricing: free = a public free tier, paid = a public paid tier', async () => {
    const free = await fresh.http.get('/agents?pricing=free');
    expect(free.body.data.map((a: any) => a.id)).toEqual([ids.support]);
    const paid = await fresh.http.get('/agents?pricing=paid');
    expect(paid.body.data.map((a: any) => a.id).sort()).toEqual([ids.support, ids.sales].sort());
  });

  it('refuses a bad limit, a tampered cursor and a cursor from another list', async () => {
    expectError(await fresh.http.get('/agents?limit=0'), 400, 'VALIDATION_ERROR');
    expectError(await fresh.http.get('/agents?limit=-1'), 400, 'VALIDATION_ERROR');
    expectError(await fresh.http.get('/agents?limit=2.5'), 400, 'VALIDATION_ERROR');
    expectError(await fresh.http.get('/agents?pricing=cheap'), 400, 'VALIDATION_ERROR');
    expect((await fresh.http.get('/agents?limit=1000')).body.pagination.limit).toBe(100);
    const first = await fresh.http.get('/agents?limit=2');
    const cursor: string = first.body.pagination.cursor;
    expectError(await fresh.http.get(`/agents?cursor=${cursor.slice(0, -2)}xx`), 400, 'INVALID_CURSOR');
    expectError(await fresh.http.get(`/agents?tag=support&cursor=${cursor}`), 400, 'INVALID_CURSOR');
  });

  it('carries review count and average rating', async () => {
    const [a, b] = [await signUp(fresh), await signUp(fresh)];
    await fresh.http.put(`/agents/${ids.sales}/reviews`, { cookie: a.cookie, json: { rating: 5 } });
    await fresh.http.put(`/agents/${ids.sales}/reviews`, { cookie: b.cookie, json: { rating: 2 } });
    const list = await fresh.http.get('/agents?tag=sales');
    expect(list.body.data[0]).toMatchObject({ reviewCount: 2, averageRating: 3.5 });
    const one = await fresh.http.get(`/agents/${ids.sales}`);
    expect(one.body.data).toMatchObject({ reviewCount: 2, averageRating: 3.5 });
  });
});

describe('PATCH /agents/{agentId} (updateAgent)', () => {
  it('updates fields and replaces capabilities, steps and tags as whole sets', async () => {
    const agent = await createAgent(t, admin, {
      tags: ['one'],
      capabilities: [{ title: 'A' }, { title: 'B' }],
      steps: [{ title: 'S1' }],
    });
    const res = await t.http.patch(`/agents/${agent.id}`, {
      cookie: admin.cookie,
      json: { name: 'Renamed', longDescription: 'Long', capabilities: [{ title: 'C' }], tags: ['two', 'three'] },
    });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ name: 'Renamed', longDescription: 'Long', slug: agent.slug });
    expect(res.body.data.capabilities.map((c: any) => [c.position, c.title])).toEqual([[1, 'C']]);
    expect(res.body.data.steps.map((s: any) => s.title)).toEqual(['S1']); // not sent: untouched
    expect(res.body.data.tags.map((x: any) => x.slug)).toEqual(['three', 'two']);

    const cleared = await t.http.patch(`/agents/${agent.id}`, { cookie: admin.cookie, json: { steps: [], longDescription: null } });
    expect(cleared.body.data.steps).toEqual([]);
    expect(cleared.body.data.longDescription).toBeNull();
    expect(cleared.body.data.capabilities).toHaveLength(1);
  });

  it('changes nothing when part of the update is invalid', async () => {
    const agent = await createAgent(t, admin, { capabilities: [{ title: 'Keep' }] });
    const res = await t.http.patch(`/agents/${agent.id}`, {
      cookie: admin.cookie,
      json: { name: 'Changed', capabilities: [{ title: '' }] },
    });
    expectError(res, 400, 'VALIDATION_ERROR');
    const after = await t.http.get(`/agents/${agent.id}`);
    expect(after.body.data.name).toBe(agent.name);
    expect(after.body.data.capabilities.map((c: any) => c.title)).toEqual(['Keep']);
  });

  it('answers 409 for a taken slug, 404 for an unknown agent, 401 and 403 for callers without the role', async () => {
    const [a, b] = [await createAgent(t, admin), await createAgent(t, admin)];
    expectError(await t.http.patch(`/agents/${a.id}`, { cookie: admin.cookie, json: { slug: b.slug } }), 409, 'CONFLICT');
    expectError(
      await t.http.patch('/agents/6f1d3f8e-5b0e-4c1a-9f51-9a0a3c1f2b7d', { cookie: admin.cookie, json: { name: 'x' } }),
      404,
      'NOT_FOUND',
    );
    expectError(await t.http.patch(`/agents/${a.id}`, { json: { name: 'x' } }), 401, 'UNAUTHORIZED');
    expectError(await t.http.patch(`/agents/${a.id}`, { cookie: user.cookie, json: { name: 'x' } }), 403, 'FORBIDDEN');
  });
});

describe('DELETE /agents/{agentId} (deleteAgent)', () => {
  it('soft-deletes: status inactive, hidden from the public, the record kept', async () => {
    const agent = await createAgent(t, admin);
    const res = await t.http.delete(`/agents/${agent.id}`, { cookie: admin.cookie });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ id: agent.id });
    expectError(await t.http.get(`/agents/${agent.id}`), 404, 'NOT_FOUND');
    const list = await walk(t, '/agents', { limit: 100 });
    expect(list.map((a) => a.id)).not.toContain(agent.id);
    const kept = await t.http.get(`/agents/${agent.id}`, { cookie: admin.cookie });
    expect(kept.body.data.status).toBe('inactive');
    // Deleting again is harmless.
    expect((await t.http.delete(`/agents/${agent.id}`, { cookie: admin.cookie })).status).toBe(200);
  });

  it('answers 401, 403 and 404', async () => {
    const agent = await createAgent(t, admin);
    expectError(await t.http.delete(`/agents/${agent.id}`), 401, 'UNAUTHORIZED');
    expectError(await t.http.delete(`/agents/${agent.id}`, { cookie: user.cookie }), 403, 'FORBIDDEN');
    expectError(await t.http.delete('/agents/6f1d3f8e-5b0e-4c1a-9f51-9a0a3c1f2b7d', { cookie: admin.cookie }), 404, 'NOT_FOUND');
    expect((await t.http.get(`/agents/${agent.id}`)).status).toBe(200);
  });
});

describe('POST /agents/{agentId}/install (installAgent)', () => {
  it('counts a user once under 20 parallel requests and records one install interaction', async () => {
    const agent = await createAgent(t, admin);
    const installer = await signUp(t);
    const results = await Promise.all(
      Array.from({ length: 20 }, () => t.http.post(`/agents/${agent.id}/install`, { cookie: installer.cookie })),
    );
    expect(results.map((r) => r.status)).toEqual(Array(20).fill(200));
    expect(results.map((r) => r.body.data.installs)).toEqual(Array(20).fill(1));
    const other = await signUp(t);
    const second = await t.http.post(`/agents/${agent.id}/install`, { cookie: other.cookie });
    expect(second.body.data).toEqual({ installs: 2 });
    expect((await t.http.get(`/agents/${agent.id}`)).body.data.installs).toBe(2);
    const events = await rows<{ userId: string }>(
      t.db,
      sql`select user_id as "userId" from interactions where type = 'install' and agent_id = ${agent.id} order by created_at`,
    );
    expect(events.map((e) => e.userId).sort()).toEqual([installer.userId, other.userId].sort());
  });

  it('needs a signed-in user, a published agent, and an active one', async () => {
    const agent = await createAgent(t, admin);
    expectError(await t.http.post(`/agents/${agent.id}/install`), 401, 'UNAUTHORIZED');
    const soon = await createAgent(t, admin, { status: 'coming_soon' });
    expectError(await t.http.post(`/agents/${soon.id}/install`, { cookie: user.cookie }), 422, 'INVALID_STATE');
    const draft = await createAgent(t, admin, { status: 'draft' });
    expectError(await t.http.post(`/agents/${draft.id}/install`, { cookie: user.cookie }), 404, 'NOT_FOUND');
    expect((await t.http.get(`/agents/${soon.id}`)).body.data.installs).toBe(0);
  });
});
