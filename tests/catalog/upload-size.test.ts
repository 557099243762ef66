import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, type TestUser } from '../support/users.ts';
import { expectError, imageUpload } from './helpers.ts';

/**
 * A local upload URL takes the file it was issued for, once (review 72). docs/catalog.md: `sizeBytes`, "the file's
 * exact size (1 up to the kind's maximum) ... signed into the URL, so that URL accepts no other size"; the local PUT
 * checked only the upper bound, stored a shorter or an empty body (also a PUT with none), and a replay of the URL
 * replaced the file GET /files served as immutable.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

const uploadUrl = (sizeBytes?: number) => imageUpload(t, admin, sizeBytes);

const put = async (url: string, body?: Uint8Array<ArrayBuffer>) => {
  const res = await fetch(url, { method: 'PUT', headers: { 'content-type': 'image/png' }, ...(body ? { body } : {}) });
  return { status: res.status, body: await res.json() };
};

describe('a local upload URL', () => {
  it('attack (review 72): signed for an exact size takes no other, an empty body or none included, and stores nothing then', async () => {
    const { uploadUrl: url, publicUrl } = await uploadUrl(100);
    for (const body of [new Uint8Array(10), new Uint8Array(0), undefined, new Uint8Array(99)]) {
      const res = await put(url, body);
      expectError(res, 400, 'VALIDATION_ERROR');
      expect(res.body.error.details).toMatchObject({ receivedBytes: body?.length ?? 0, expectedBytes: 100 });
      expect((await fetch(publicUrl)).status).toBe(404);
    }
    expect((await put(url, new Uint8Array(101))).status).toBe(413);
    const stored = await put(url, new Uint8Array(100).fill(7));
    expect([stored.status, stored.body.data.size]).toEqual([200, 100]);
    const served = new Uint8Array(await (await fetch(publicUrl)).arrayBuffer());
    expect([served.length, served[0]]).toEqual([100, 7]);
  });

  it('attack (review 72): stores its file once; a replay, an empty one included, replaces nothing', async () => {
    const { uploadUrl: url, publicUrl } = await uploadUrl(100);
    expect((await put(url, new Uint8Array(100).fill(1))).status).toBe(200);
    const again = await put(url, new Uint8Array(100).fill(2));
    expectError(again, 409, 'CONFLICT');
    expectError(await put(url), 400, 'VALIDATION_ERROR');
    const served = new Uint8Array(await (await fetch(publicUrl)).arrayBuffer());
    expect([served.length, new Set(served).size, served[0]]).toEqual([100, 1, 1]);
  });

  it('without a declared size takes any size up to the kind\'s limit, but never an empty body', async () => {
    const { uploadUrl: url, publicUrl } = await uploadUrl();
    const empty = await put(url, new Uint8Array(0));
    expectError(empty, 400, 'VALIDATION_ERROR');
    expect(empty.body.error.details).toMatchObject({ receivedBytes: 0 });
    expect(empty.body.error.details.expectedBytes).toBeUndefined();
    expect((await put(url, new Uint8Array(37))).status).toBe(200);
    expect((await fetch(publicUrl)).headers.get('content-length')).toBe('37');
  });
});
