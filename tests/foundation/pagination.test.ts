import { createRoute, z } from '@hono/zod-openapi';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { okPage, pageEnvelopeOf } from '../../functions/http/envelope.ts';
import { afterCursor, CursorSigner, DEFAULT_LIMIT, finishPage, MAX_LIMIT, pageQuerySchema, pageScope, readPage } from '../../functions/http/pagination.ts';
import { jsonResponse, newRouter } from '../../functions/http/router.ts';
import { rows, sql } from '../../functions/platform/db.ts';
import { startTestApp, TEST_SECRET, type TestApp } from '../support/app.ts';
import { walkPages } from '../support/pages.ts';

/**
 * Keyset pagination with signed cursors (contract.md section 1), over HTTP through a list route that exists
 * only in this test and is built exactly as the domains build theirs (pageQuerySchema, readPage, afterCursor,
 * finishPage) on a table created here. Rows share created_at values on purpose: the (created_at, id) keyset
 * must still return every row exactly once.
 */

const item = z.object({ id: z.uuid(), createdAt: z.string(), shelf: z.string() });

function listRoutes() {
  const router = newRouter();
  for (const list of ['items', 'other-items'] as const) {
    router.openapi(
      createRoute({
        method: 'get',
        path: `/__test/${list}`,
        request: { query: pageQuerySchema.extend({ shelf: z.string().optional() }) },
        responses: { 200: jsonResponse(pageEnvelopeOf(item), 'a page') },
      }),
      async (c) => {
        const query = c.req.valid('query');
        const { cursors, database } = c.var.deps;
        const page = await readPage(cursors, pageScope(`test-${list}`, { shelf: query.shelf }), query);
        const fetched = await rows<{ id: string; createdAt: Date; shelf: string }>(
          database.db,
          sql`select id, created_at as "createdAt", shelf from test_items
              where ${afterCursor(page)} and (${query.shelf ?? null}::text is null or shelf = ${query.shelf ?? null})
              order by created_at desc, id desc limit ${page.limit + 1}`,
        );
        const { items, pagination } = await finishPage(cursors, page, fetched);
        return c.json(okPage(items.map((i) => ({ ...i, createdAt: new Date(i.createdAt).toISOString() })), pagination), 200);
      },
    );
  }
  return router;
}

let t: TestApp;
/** All rows in the order the API must return them. */
let expected: Array<{ id: string; createdAt: string }>;
const ROWS = 45;

beforeAll(async () => {
  t = await startTestApp({ routes: (app) => app.route('/', listRoutes()) });
  await sql`create table test_items (id uuid primary key, created_at timestamptz(3) not null, shelf text not null)`.execute(t.db);
  // 45 rows over 4 timestamps: ties on created_at everywhere, so only the id breaks them.
  const stamps = ['2026-01-01T00:00:00.000Z', '2026-01-02T00:00:00.000Z', '2026-01-02T00:00:00.001Z', '2026-01-03T00:00:00.000Z'];
  for (let i = 0; i < ROWS; i++) {
    await sql`insert into test_items values (gen_random_uuid(), ${stamps[i % stamps.length]}::timestamptz, ${i % 3 === 0 ? 'a' : 'b'})`.execute(t.db);
  }
  const all = await rows<{ id: string; createdAt: Date }>(t.db, sql`select id, created_at as "createdAt" from test_items`);
  expected = all
    .map((r) => ({ id: r.id, createdAt: new Date(r.createdAt).toISOString() }))
    .sort((a, b) => (a.createdAt === b.createdAt ? (a.id < b.id ? 1 : -1) : a.createdAt < b.createdAt ? 1 : -1));
});
afterAll(() => t.close());

async function walk(path: string, limit: number): Promise<{ ids: string[]; pages: number }> {
  const { items, pages } = await walkPages<{ id: string }>(t, path, { limit, maxPages: ROWS + 1 });
  return { ids: items.map((i) => i.id), pages };
}

describe('keyset walk', () => {
  it('returns every row exactly once, newest first, ties broken by id, whatever the page size', async () => {
    for (const limit of [1, 2, 7, 11, 44, 45, 100]) {
      const { ids, pages } = await walk('/__test/items', limit);
      expect(ids, `limit ${limit}`).toEqual(expected.map((e) => e.id));
      expect(pages).toBe(Math.max(1, Math.ceil(ROWS / limit)));
    }
  });

  it('keeps the filter in the walk', async () => {
    const shelfA = (await rows<{ id: string }>(t.db, sql`select id from test_items where shelf = 'a'`)).map((r) => r.id);
    const { ids } = await walk('/__test/items?shelf=a', 4);
    expect(ids.sort()).toEqual(shelfA.sort());
  });

  it('answers the paginated envelope: data, pagination { cursor, hasMore, limit }, error null', async () => {
    const res = await t.http.get('/__test/items?limit=5');
    expect(Object.keys(res.body).sort()).toEqual(['data', 'error', 'pagination', 'status']);
    expect(res.body).toMatchObject({ status: 'success', error: null, pagination: { hasMore: true, limit: 5 } });
    expect(res.body.pagination.cursor).toEqual(expect.any(String));
    expect(res.body.data).toHaveLength(5);
  });

  it('the last page says hasMore false and its cursor leads to an empty page', async () => {
    const last = await t.http.get(`/__test/items?limit=${ROWS}`);
    expect(last.body.pagination.hasMore).toBe(false);
    const after = await t.http.get(`/__test/items?cursor=${encodeURIComponent(last.body.pagination.cursor)}`);
    expect(after.status).toBe(200);
    expect(after.body.data).toEqual([]);
    expect(after.body.pagination.hasMore).toBe(false);
  });

  it('an empty list hands back an empty cursor, and that cursor passed back is a page too (not a 400)', async () => {
    const empty = await t.http.get('/__test/items?shelf=none');
    expect(empty.body).toMatchObject({ data: [], pagination: { cursor: '', hasMore: false } });
    const again = await t.http.get(`/__test/items?shelf=none&cursor=${encodeURIComponent(empty.body.pagination.cursor)}`);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ data: [], pagination: { hasMore: false } });
  });

  it('a row added before the cursor position after the cursor was issued does not shift the next page (a seek, not an offset)', async () => {
    // What page N costs on the real lists is measured in keyset-plans.test.ts (EXPLAIN ANALYZE of the app's SQL).
    const first = await t.http.get('/__test/items?limit=10');
    const cursor = first.body.pagination.cursor as string;
    const before = await t.http.get(`/__test/items?limit=10&cursor=${encodeURIComponent(cursor)}`);
    try {
      await sql`insert into test_items values (gen_random_uuid(), '2027-01-01T00:00:00Z', 'c')`.execute(t.db);
      const afterInsert = await t.http.get(`/__test/items?limit=10&cursor=${encodeURIComponent(cursor)}`);
      expect(afterInsert.body.data).toEqual(before.body.data);
    } finally {
      await sql`delete from test_items where shelf = 'c'`.execute(t.db);
    }
  });
});

describe('limit', () => {
  it(`defaults to ${DEFAULT_LIMIT}`, async () => {
    const res = await t.http.get('/__test/items');
    expect(res.body.data).toHaveLength(DEFAULT_LIMIT);
    expect(res.body.pagination.limit).toBe(DEFAULT_LIMIT);
  });

  it.each([101, 1000, 99999999999])(`clamps %s to ${MAX_LIMIT}`, async (limit) => {
    const res = await t.http.get(`/__test/items?limit=${limit}`);
    expect(res.status).toBe(200);
    expect(res.body.pagination.limit).toBe(MAX_LIMIT);
    expect(res.body.data).toHaveLength(ROWS);
  });

  it.each(['0', '-1', '1.5', 'abc', '', '1e2', ' 5'])('refuses limit=%j with 400 VALIDATION_ERROR naming query.limit', async (limit) => {
    const res = await t.http.get(`/__test/items?limit=${encodeURIComponent(limit)}`);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('VALIDATION_ERROR');
    expect(res.body.error.details.issues.map((i: { path: string }) => i.path)).toEqual(['query.limit']);
  });
});

describe('cursor integrity', () => {
  let cursor: string;
  beforeAll(async () => {
    cursor = (await t.http.get('/__test/items?limit=3')).body.pagination.cursor;
  });

  const expectInvalid = async (path: string) => {
    const res = await t.http.get(path);
    expect(res.status, path).toBe(400);
    expect(res.body.error.code).toBe('INVALID_CURSOR');
  };

  it('any altered character is refused with 400 INVALID_CURSOR', async () => {
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.';
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: cursor.length - 1 }), fc.constantFrom(...alphabet), async (index, ch) => {
        fc.pre(cursor[index] !== ch);
        const altered = cursor.slice(0, index) + ch + cursor.slice(index + 1);
        await expectInvalid(`/__test/items?cursor=${encodeURIComponent(altered)}`);
      }),
      { numRuns: 150 },
    );
  });

  it('every change to the last character of the signature is refused (no non-canonical base64)', async () => {
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    for (const ch of alphabet) {
      if (ch === cursor.at(-1)) continue;
      await expectInvalid(`/__test/items?cursor=${encodeURIComponent(cursor.slice(0, -1) + ch)}`);
    }
  });

  it('any truncation is refused', async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: cursor.length - 1 }), async (length) => {
        await expectInvalid(`/__test/items?cursor=${encodeURIComponent(cursor.slice(0, length))}`);
      }),
      { numRuns: 60 },
    );
  });

  it('a cursor issued for another list, or for the same list with other filters, is refused', async () => {
    await expectInvalid(`/__test/other-items?cursor=${encodeURIComponent(cursor)}`);
    await expectInvalid(`/__test/items?shelf=a&cursor=${encodeURIComponent(cursor)}`);
    const shelfCursor = (await t.http.get('/__test/items?shelf=a&limit=2')).body.pagination.cursor;
    await expectInvalid(`/__test/items?shelf=b&cursor=${encodeURIComponent(shelfCursor)}`);
    await expectInvalid(`/__test/items?cursor=${encodeURIComponent(shelfCursor)}`);
  });

  it('a cursor signed with another secret is refused', async () => {
    const foreign = await new CursorSigner('another-secret-another-secret-another-secret').sign('test-items', {
      createdAt: new Date(),
      id: expected[0]!.id,
    });
    await expectInvalid(`/__test/items?cursor=${encodeURIComponent(foreign)}`);
  });

  it('random strings are refused, never a 500', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ minLength: 1, maxLength: 200 }), async (junk) => {
        const res = await t.http.get(`/__test/items?cursor=${encodeURIComponent(junk)}`);
        expect([400]).toContain(res.status);
        expect(['INVALID_CURSOR', 'VALIDATION_ERROR']).toContain(res.body.error.code);
      }),
      { numRuns: 100 },
    );
  });
});

describe('CursorSigner', () => {
  const signer = new CursorSigner(TEST_SECRET);
  const position = fc.record({
    createdAt: fc.date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('9999-12-31T23:59:59.999Z'), noInvalidDate: true }),
    id: fc.string({ maxLength: 64 }),
  });

  it('round-trips any scope and position', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ maxLength: 100 }), position, async (scope, pos) => {
        const cursor = await signer.sign(scope, pos);
        expect(cursor).toMatch(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
        const back = await signer.verify(scope, cursor);
        expect(back.id).toBe(pos.id);
        expect(back.createdAt.getTime()).toBe(pos.createdAt.getTime());
      }),
    );
  });

  it('refuses a valid cursor under any other scope', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string(), fc.string(), position, async (scope, other, pos) => {
        fc.pre(scope !== other);
        const cursor = await signer.sign(scope, pos);
        await expect(signer.verify(other, cursor)).rejects.toMatchObject({ code: 'INVALID_CURSOR' });
      }),
    );
  });

  it('pageScope is independent of filter order and leaves out unset filters', () => {
    expect(pageScope('agents', { tag: 'ai', status: 'active', q: undefined })).toBe(pageScope('agents', { status: 'active', tag: 'ai' }));
    expect(pageScope('agents', { tag: 'a&b' })).not.toBe(pageScope('agents', { tag: 'a', b: '' }));
  });
});
