import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, type TestUser } from '../support/users.ts';
import { browserGet } from '../support/http.ts';

/**
 * Found by a review (03) of rule 29 ("another site cannot make an admin's browser act as the admin, reads included"): the rule is
 * in requireAdmin (functions/http/access.ts), which our /admin routes call. The auth library's own admin reads under
 * /api/auth/admin/* (list-users, get-user, list-user-sessions) never pass through requireAdmin, so an <img> of
 * another site still runs them with the admin's SameSite=None cookie.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

const read = (path: string, headers: Record<string, string>) => browserGet(t.baseUrl, path, { cookie: admin.cookie, ...headers });

describe("another site's <img> riding on an admin's cookie", () => {
  it("attack: cannot run the auth library's admin reads either", async () => {
    const image = { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'no-cors', 'sec-fetch-dest': 'image', referer: 'https://evil.example/' };
    const paths = [
      '/api/auth/admin/list-users?searchValue=a&searchField=email&searchOperator=contains&limit=100',
      `/api/auth/admin/get-user?id=${admin.userId}`,
    ];
    const answers = [];
    for (const path of paths) answers.push([path, (await read(path, image)).status]);
    expect(answers).toEqual(paths.map((p) => [p, 403]));
  });
});
