import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * The organization plugin's endpoints answer input any signed-in account can send with a 4xx, never a 500 (contract:
 * 500 INTERNAL "never for bad input"). Found by a review (review 05): get-full-organization's membersLimit went into a
 * LIMIT as it came (negative or past bigint: a 500, for a stranger to the organization too); list-members' `in` and
 * `not_in` with one value, `eq` with a list, a filterField without a value and text matching on createdAt failed in
 * the adapter or the database; organization/update passed any field of `data` on (a createdAt that is no date, a new
 * id, or nothing at all). And found while bounding those: list-members answered a page with no member (a filter matching nobody, an offset past
 * the last member) with a 500, the plugin reading the page's users with `in ()`.
 */
let t: TestApp;
let owner: TestUser;
let member: TestUser;
let stranger: TestUser;
let orgId: string;

beforeAll(async () => {
  t = await startTestApp();
  owner = await signUp(t, { verified: true, name: 'Owner' });
  member = await signUp(t, { verified: true, name: 'Member' });
  stranger = await signUp(t, { name: 'Stranger' });
  const org = await t.http.post('/api/auth/organization/create', { ...withOrigin(owner), json: { name: 'Acme', slug: `acme-${randomUUID().slice(0, 8)}` } });
  expect(org.status, org.text).toBe(200);
  orgId = org.body.id;
  const inv = await t.http.post('/api/auth/organization/invite-member', { ...withOrigin(owner), json: { email: member.email, role: 'member', organizationId: orgId } });
  expect((await t.http.post('/api/auth/organization/accept-invitation', { ...withOrigin(member), json: { invitationId: inv.body.id } })).status).toBe(200);
});
afterAll(() => t?.close());

function withOrigin(u: TestUser) {
  return { cookie: u.cookie, headers: { origin: t.baseUrl } };
}
const errorLines = (from: number) => t.logs.slice(from).filter((l) => l.level === 'error');

describe('get-full-organization membersLimit', () => {
  it.each(['-5', '99999999999999999999', '0', '101', '1.5', 'ten'])('membersLimit=%s: 400 VALIDATION_ERROR, for a member and for a stranger', async (limit) => {
    const before = t.logs.length;
    for (const caller of [owner, stranger]) {
      const res = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${orgId}&membersLimit=${limit}`, { cookie: caller.cookie });
      expect([caller.name, res.status, res.body.code]).toEqual([caller.name, 400, 'VALIDATION_ERROR']);
    }
    expect(errorLines(before)).toEqual([]);
  });

  it('control: a limit from 1 to 100 reads that many members', async () => {
    const one = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${orgId}&membersLimit=1`, { cookie: owner.cookie });
    expect(one.status, one.text).toBe(200);
    expect(one.body.members).toHaveLength(1);
    const all = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${orgId}&membersLimit=100`, { cookie: owner.cookie });
    expect(all.body.members).toHaveLength(2);
  });
});

describe('list-members filters', () => {
  const list = (query: string) => t.http.get(`/api/auth/organization/list-members?organizationId=${orgId}&${query}`, { cookie: owner.cookie });

  it.each([
    ['in with one value', 'filterField=role&filterOperator=in&filterValue=owner'],
    ['not_in with one value', 'filterField=role&filterOperator=not_in&filterValue=owner'],
    ['eq with a list', 'filterField=role&filterOperator=eq&filterValue=owner&filterValue=admin'],
    ['text matching on createdAt', 'filterField=createdAt&filterOperator=contains&filterValue=2026-01-01'],
    ['a filterField without a value', 'filterField=role'],
    ['in without a value', 'filterField=role&filterOperator=in'],
  ])('%s: 400 VALIDATION_ERROR', async (_what, query) => {
    const before = t.logs.length;
    const res = await list(query);
    expect([res.status, res.body.code], res.text).toEqual([400, 'VALIDATION_ERROR']);
    expect(errorLines(before)).toEqual([]);
  });

  it('control: in and not_in with a list (filterValue repeated) filter as they say', async () => {
    const roles = (res: { body: { members: Array<{ role: string }> } }) => res.body.members.map((m) => m.role).sort();
    expect(roles(await list('filterField=role&filterOperator=in&filterValue=owner&filterValue=admin'))).toEqual(['owner']);
    expect(roles(await list('filterField=role&filterOperator=not_in&filterValue=owner&filterValue=admin'))).toEqual(['member']);
  });

  it.each([
    ['a filter matching no member', 'filterField=role&filterValue=admin'],
    ['not_in every role there is', 'filterField=role&filterOperator=not_in&filterValue=owner&filterValue=member'],
    ['an offset past the last member', 'offset=5'],
    ['createdAt in a list of dates none has', 'filterField=createdAt&filterOperator=in&filterValue=2020-01-01&filterValue=2020-01-02'],
  ])('%s: an empty page, 200', async (_what, query) => {
    const before = t.logs.length;
    const res = await list(query);
    expect(res.status, res.text).toBe(200);
    expect(res.body.members).toEqual([]);
    expect(errorLines(before)).toEqual([]);
  });
});

describe('organization/update data', () => {
  const update = (data: unknown) => t.http.post('/api/auth/organization/update', { ...withOrigin(owner), json: { organizationId: orgId, data } });

  it.each([
    ['a createdAt that is no date', { createdAt: 'garbage' }],
    ['a createdAt that is a date', { createdAt: '2020-01-01T00:00:00Z' }],
    ['a new id', { id: 'new-id' }],
    ['a field beside the name', { name: 'Acme 2', extra: 1 }],
    ['nothing', {}],
  ])('%s: 400 VALIDATION_ERROR, nothing changed', async (_what, data) => {
    const before = t.logs.length;
    const res = await update(data);
    expect([res.status, res.body.code], res.text).toEqual([400, 'VALIDATION_ERROR']);
    expect(errorLines(before)).toEqual([]);
    const full = await t.http.get(`/api/auth/organization/get-full-organization?organizationId=${orgId}`, { cookie: owner.cookie });
    expect(full.body).toMatchObject({ id: orgId, name: 'Acme' });
  });

  it('control: name, slug, logo and metadata are updated', async () => {
    const slug = `acme-${randomUUID().slice(0, 8)}`;
    const res = await update({ name: 'Acme', slug, logo: 'https://example.test/logo.png', metadata: { plan: 'team' } });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ id: orgId, name: 'Acme', slug, logo: 'https://example.test/logo.png' });
  });
});
