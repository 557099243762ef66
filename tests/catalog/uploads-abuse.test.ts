import { readdirSync, readlinkSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, type TestUser } from '../support/users.ts';
import { createAgent, expectError, imageUpload, S3_TEST_ENV } from './helpers.ts';

/**
 * What a hostile caller tried on agent media (review 37): anonymous HEADs of a public file that each left the file open
 * until the process could accept nothing; content types Object.prototype answers for, signed as if allowed; two PUTs
 * of one upload URL at once, a 500 and a file mixing both bodies.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

const upload = (sizeBytes: number) => imageUpload(t, admin, sizeBytes);

/** File descriptors of this process (the test app serves in-process) open on `path`. */
function openDescriptorsOn(path: string): number {
  let n = 0;
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`).endsWith(path)) n++;
    } catch {
      // closed meanwhile
    }
  }
  return n;
}

describe('public files', () => {
  it('attack: anonymous HEADs of a public upload leave no file open, and answer what a GET would', async () => {
    const { uploadUrl, publicUrl } = await upload(200_000);
    const put = await fetch(uploadUrl, { method: 'PUT', headers: { 'content-type': 'image/png' }, body: new Uint8Array(200_000) });
    expect(put.status).toBe(200);
    const key = new URL(publicUrl).pathname.slice('/files/'.length);

    for (let i = 0; i < 100; i++) {
      const head = await fetch(publicUrl, { method: 'HEAD' });
      expect(head.status).toBe(200);
      await head.arrayBuffer();
    }
    for (let i = 0; i < 50; i++) await (await fetch(publicUrl, { method: 'HEAD', headers: { range: 'bytes=1000-' } })).arrayBuffer();
    await new Promise((r) => setTimeout(r, 200));
    expect(openDescriptorsOn(key)).toBe(0);

    // The HEAD's headers are the GET's, without a body.
    for (const range of [undefined, 'bytes=1000-']) {
      const headers = range ? { range } : undefined;
      const [head, get] = await Promise.all([fetch(publicUrl, { method: 'HEAD', headers }), fetch(publicUrl, { headers })]);
      const body = await get.arrayBuffer();
      expect({ status: head.status, length: head.headers.get('content-length'), range: head.headers.get('content-range'), type: head.headers.get('content-type') }).toEqual({
        status: get.status,
        length: String(body.byteLength),
        range: get.headers.get('content-range'),
        type: 'image/png',
      });
    }
    // A GET read to its end, and one whose reader goes away, leave nothing open either.
    const aborted = new AbortController();
    const partial = await fetch(publicUrl, { signal: aborted.signal });
    await partial.body!.getReader().read();
    aborted.abort();
    await new Promise((r) => setTimeout(r, 200));
    expect(openDescriptorsOn(key)).toBe(0);
  });

  it('PUTs of one upload URL at once: one stores its body whole, the others are refused, and none is a 500', async () => {
    // Review 37: two at once wrote one temporary file (a 500, both bodies mixed). Review 72: a URL stores its file
    // once, of the size it was signed for (the 10-byte bodies), so the file served as immutable is never replaced.
    for (let round = 0; round < 3; round++) {
      const { uploadUrl, publicUrl } = await upload(2_000_000);
      const bodies = Array.from({ length: 8 }, (_, i) => new Uint8Array(i % 2 ? 2_000_000 : 10).fill(i + 1));
      const statuses = await Promise.all(
        bodies.map((body) => fetch(uploadUrl, { method: 'PUT', headers: { 'content-type': 'image/png' }, body }).then((r) => r.status)),
      );
      expect(statuses.filter((_, i) => i % 2 === 0), `round ${round}: the short bodies`).toEqual([400, 400, 400, 400]);
      expect(statuses.filter((_, i) => i % 2 === 1).sort(), `round ${round}: the whole ones`).toEqual([200, 409, 409, 409]);
      const stored = bodies[statuses.indexOf(200)]!;
      const served = new Uint8Array(await (await fetch(publicUrl)).arrayBuffer());
      expect(served.length === stored.length && served.every((x, j) => x === stored[j]), `round ${round}: the file served is the stored body, whole`).toBe(true);
    }
  });
});

describe('the upload content-type allowlist', () => {
  it.each(['__proto__', 'constructor', 'CONSTRUCTOR'])('refuses %s, a name Object.prototype answers for', async (contentType) => {
    const agent = await createAgent(t, admin);
    for (const kind of ['image', 'video']) {
      const res = await t.http.post(`/agents/${agent.id}/uploads`, { cookie: admin.cookie, json: { kind, contentType, filename: 'x.png' } });
      expectError(res, 400, 'VALIDATION_ERROR');
    }
  });

  it('signs nothing at S3 for such a type', async () => {
    const s3 = await startTestApp({ env: S3_TEST_ENV });
    try {
      const s3Admin = await createAdmin(s3);
      const agent = await createAgent(s3, s3Admin);
      const res = await s3.http.post(`/agents/${agent.id}/uploads`, { cookie: s3Admin.cookie, json: { kind: 'image', contentType: '__proto__', filename: 'page.html' } });
      expectError(res, 400, 'VALIDATION_ERROR');
      // control: an allowed type is signed
      const png = await s3.http.post(`/agents/${agent.id}/uploads`, { cookie: s3Admin.cookie, json: { kind: 'image', contentType: 'image/png', filename: 'a.png' } });
      expect(png.status, png.text).toBe(201);
    } finally {
      await s3.close();
    }
  });
});
