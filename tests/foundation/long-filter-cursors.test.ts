import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin } from '../support/users.ts';

/**
 * contract.md §1 Conventions: "Pagination: query `cursor` (opaque), `limit` (...)" and interface-spec §2.2:
 * "cursor | string | opaque; pass back as the `cursor` query parameter for the next page". The error table keeps
 * 400 INVALID_CURSOR for a cursor "that was altered, truncated, or issued for another list"; a cursor the server
 * itself just issued for this very list is none of these and leads to the next page, however long the list's filters.
 *
 * (Found by review 11: the cursor carried the list's filters, so with a search the service accepts, up to 200
 * characters, it handed out a cursor longer than the 512 characters its own query schema took, and page 2 was
 * refused. The filters are now signed, not carried: functions/http/pagination.ts. That a cursor of another list or
 * other filters is still refused: tests/foundation/pagination.test.ts.)
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t?.close());

describe('a cursor issued for a list with long filters leads to the next page', () => {
  it('GET /agents?q=<long search> : the cursor of page 1 is accepted for page 2', async () => {
    const admin = await createAdmin(t);
    for (const slug of ['long-q-1', 'long-q-2', 'long-q-3']) {
      const res = await t.http.post('/agents', {
        cookie: admin.cookie,
        json: { slug, name: 'alpha', description: 'alpha agent', status: 'active', redirectUris: ['http://127.0.0.1:9/cb'] },
      });
      expect(res.status).toBe(201);
    }
    // 33 words, 197 characters: within the documented q limit (the service validates max 200)
    const q = Array.from({ length: 33 }, () => 'alpha').join(' ');
    expect(q.length).toBeLessThanOrEqual(200);
    const first = await t.http.get(`/agents?limit=1&q=${encodeURIComponent(q)}`);
    expect(first.status).toBe(200);
    expect(first.body.data).toHaveLength(1);
    expect(first.body.pagination.hasMore).toBe(true);
    const cursor: string = first.body.pagination.cursor;
    const second = await t.http.get(`/agents?limit=1&q=${encodeURIComponent(q)}&cursor=${encodeURIComponent(cursor)}`);
    expect({ status: second.status, error: second.body.error }).toMatchObject({ status: 200, error: null });
    expect(cursor.length).toBeLessThan(200);
    expect(second.body.data).toHaveLength(1);
    expect(second.body.data[0].id).not.toBe(first.body.data[0].id);
  });

  it('GET /admin/users?q=<name> : the cursor of page 1 is accepted for page 2', async () => {
    const admin = await createAdmin(t);
    // a name in a non-Latin script: each character is 9 characters once URL-encoded in the cursor's scope
    const name = '山田太郎'.repeat(15);
    for (let i = 0; i < 3; i++) {
      const res = await t.http.post('/api/auth/sign-up/email', { json: { email: `long-q-${i}@example.test`, password: `pw-long-q-${i}-xxxxxxxx`, name } });
      expect(res.status).toBe(200);
    }
    const first = await t.http.get(`/admin/users?limit=1&q=${encodeURIComponent(name)}`, { cookie: admin.cookie });
    expect(first.status).toBe(200);
    expect(first.body.pagination.hasMore).toBe(true);
    const cursor: string = first.body.pagination.cursor;
    const second = await t.http.get(`/admin/users?limit=1&q=${encodeURIComponent(name)}&cursor=${encodeURIComponent(cursor)}`, { cookie: admin.cookie });
    expect({ status: second.status, error: second.body.error }).toMatchObject({ status: 200, error: null });
    expect(second.body.data[0].id).not.toBe(first.body.data[0].id);
  });

  it('a cursor longer than any the service issues is refused as a cursor: 400 INVALID_CURSOR', async () => {
    const res = await t.http.get(`/agents?cursor=${'a'.repeat(600)}.${'b'.repeat(43)}`);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('INVALID_CURSOR');
  });
});
