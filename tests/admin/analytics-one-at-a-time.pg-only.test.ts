import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { eventually, statementsWaitingForLock } from '../support/databases.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, type TestUser } from '../support/users.ts';

/**
 * An admin's analytics run one at a time per process: a window can keep two database connections busy for seconds,
 * and an admin's tabs (or a script with their cookie) asking again and again each ran (found by a review of rule 29,
 * where another site's page re-navigated a popup through the window: that is refused as cross-site now). A second
 * request while one is computed answers 429 at once. The first is held inside its query (a test transaction holds the
 * ledger table), so the others arrive while it runs.
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

const ownTab = { 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty' };
function ask(user: TestUser, n: number): Promise<{ status: number; retryAfter: string | undefined }> {
  return new Promise((resolve, reject) => {
    const path = `/admin/analytics?from=2021-11-21&to=2026-11-20T00:00:${String(n % 60).padStart(2, '0')}Z`; // each its own URL
    const req = httpRequest(new URL(path, t.baseUrl), { method: 'GET', headers: { cookie: user.cookie, ...ownTab } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'] as string | undefined }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe("an admin's analytics asked for again and again", () => {
  it('run one window at a time for that admin; the rest answer 429 with Retry-After at once; other admins are not held up', async () => {
    let first: Promise<{ status: number }> | undefined;
    let othersWindow: Promise<{ status: number }> | undefined;
    const rest: Array<{ status: number; retryAfter: string | undefined }> = [];
    await t.db.transaction().execute(async (trx) => {
      await sql`lock table quota_ledger in access exclusive mode`.execute(trx);
      first = ask(admin, 0);
      await eventually('the first window waits inside its query', async () => (await statementsWaitingForLock(t.db, '%admin_analytics_%')) > 0);
      for (let i = 1; i <= 10; i++) rest.push(await ask(admin, i));
      // another admin's window is theirs: it runs (it waits for the same lock, and answers once it is let go)
      othersWindow = ask(other, 11);
      await eventually("the other admin's window waits inside its query too", async () => (await statementsWaitingForLock(t.db, '%admin_analytics_%')) > 1);
    });
    expect((await first!).status).toBe(200);
    expect((await othersWindow!).status).toBe(200);
    expect(rest.map((r) => [r.status, r.retryAfter])).toEqual(Array.from({ length: 10 }, () => [429, '1']));
    // once it has answered, the next one runs
    expect((await ask(admin, 12)).status).toBe(200);
  });
});
