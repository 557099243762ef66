import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, type TestUser } from '../support/users.ts';
import { browserGet } from '../support/http.ts';

/**
 * An admin read with the session cookie must be the admin's own doing (found by a review of the admin room): reads
 * skipped the origin check writes have, and the cookie is SameSite=None in production, so any page an admin opened
 * could make their browser run the 5-year analytics window (seconds of two database connections each) again and again
 * with an <img>, with nothing to read back. The marketplace's own callers never read admin data that way.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-11-20T09:00:00.000Z', env: { FRONTEND_URL: 'https://app.example' } });
  admin = await createAdmin(t);
});
afterAll(() => t.close());

const fiveYears = '/admin/analytics?from=2021-11-21&to=2026-11-20';
const read = async (path: string, headers: Record<string, string>) => {
  const res = await browserGet(t.baseUrl, path, { cookie: admin.cookie, ...headers });
  return { status: res.status, body: JSON.parse(res.text) };
};

describe("another site riding on an admin's cookie", () => {
  it("attack: an <img>, a script, a frame or a prefetch of another site cannot run admin reads with the admin's cookie", async () => {
    const fromElsewhere = { 'sec-fetch-site': 'cross-site', referer: 'https://evil.example/page' };
    const requests: Array<Record<string, string>> = [
      { 'sec-fetch-mode': 'no-cors', 'sec-fetch-dest': 'image' },
      { 'sec-fetch-mode': 'no-cors', 'sec-fetch-dest': 'script' },
      { 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'iframe' },
      { 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty', origin: 'https://evil.example' },
      { 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document', 'sec-purpose': 'prefetch' },
      // a top-level navigation too: the admin API is not navigated to from other sites (the /admin page is), and a page
      // could navigate a popup it opened through the five-year window again and again without a click (found by a review)
      { 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' },
    ];
    for (const path of [fiveYears, '/admin/users', '/admin/interactions']) {
      for (const headers of requests) {
        const res = await read(path, { ...fromElsewhere, ...headers });
        expect([path, headers, res.status, res.body?.error?.code, res.body?.error?.details?.reason]).toEqual([path, headers, 403, 'FORBIDDEN', 'cross_site']);
      }
    }
  });

  it('the admin page, a bookmark, a trusted front end and a script without a browser still read; a link from elsewhere still opens /admin', async () => {
    const allowed: Array<Record<string, string>> = [
      { 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty' },
      { 'sec-fetch-site': 'none', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' },
      { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty', origin: 'https://app.example' },
      {},
    ];
    for (const headers of allowed) {
      const res = await read(fiveYears, headers);
      expect([headers, res.status]).toEqual([headers, 200]);
    }
    const headers = { cookie: admin.cookie, 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' };
    const page = (await browserGet(t.baseUrl, '/admin', headers)).status;
    expect(page).toBe(200);
  });
});
