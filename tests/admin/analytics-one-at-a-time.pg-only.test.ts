import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { eventually, statementsWaitingForLock } from '../support/databases.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, type TestUser } from '../support/users.ts';

/**
 * An admin's analytics run one at a time (found by a review of rule 29): a page of another site can navigate a popup
 * it opened through /admin/analytics again and again without a click (a top-level navigation is the admin's own by
 * its fetch metadata), each a window that can keep two database connections busy for seconds; the browser drops each
 * load, the server went on computing all of them at once. A second request while one is computed answers 429.
 * The first is held inside its query (a test transaction holds the ledger table), so the others arrive while it runs.
 */
let t: TestApp;
let admin: TestUser;
let other: TestUser;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-11-20T09:00:00.000Z' });
  admin = await createAdmin(t);
  other = await createAdmin(t);
});
afterAll(() => t.close());

const popup = { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document', referer: 'https://evil.example/' };
function navigate(user: TestUser, n: number): Promise<{ status: number; retryAfter: string | undefined }> {
  return new Promise((resolve, reject) => {
    const path = `/admin/analytics?from=2021-11-21&to=2026-11-20&n=${n}`;
    const req = httpRequest(new URL(path, t.baseUrl), { method: 'GET', headers: { cookie: user.cookie, ...popup } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'] as string | undefined }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe("a popup another site re-navigates through an admin's analytics", () => {
  it('attack: runs one window at a time for that admin; the rest answer 429 with Retry-After at once', async () => {
    let first: Promise<{ status: number }> | undefined;
    let othersWindow: Promise<{ status: number }> | undefined;
    const rest: Array<{ status: number; retryAfter: string | undefined }> = [];
    await t.db.transaction().execute(async (trx) => {
      await sql`lock table quota_ledger in access exclusive mode`.execute(trx);
      first = navigate(admin, 0);
      await eventually('the first window waits inside its query', async () => (await statementsWaitingForLock(t.db, '%admin_analytics_%')) > 0);
      for (let i = 1; i <= 10; i++) rest.push(await navigate(admin, i));
      // another admin's window is theirs: it runs (it waits for the same lock, and answers once it is let go)
      othersWindow = navigate(other, 11);
      await eventually("the other admin's window waits inside its query too", async () => (await statementsWaitingForLock(t.db, '%admin_analytics_%')) > 1);
    });
    expect((await first!).status).toBe(200);
    expect((await othersWindow!).status).toBe(200);
    expect(rest.map((r) => [r.status, r.retryAfter])).toEqual(Array.from({ length: 10 }, () => [429, '1']));
    // once it has answered, the next one runs
    expect((await navigate(admin, 12)).status).toBe(200);
  });
});
