import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';

/** The identity operations are in /openapi.json under the contract's operationIds. */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

it('lists getMe, banUser, unbanUser and setUserRole with their paths and methods', async () => {
  const doc = (await t.http.get('/openapi.json')).body;
  const ops: Record<string, string> = {};
  for (const [path, item] of Object.entries<Record<string, { operationId?: string }>>(doc.paths)) {
    for (const [method, op] of Object.entries(item)) if (op?.operationId) ops[op.operationId] = `${method.toUpperCase()} ${path}`;
  }
  expect(ops).toMatchObject({
    getMe: 'GET /me',
    banUser: 'POST /admin/users/{userId}/ban',
    unbanUser: 'POST /admin/users/{userId}/unban',
    setUserRole: 'PUT /admin/users/{userId}/role',
  });
  const roleBody = doc.paths['/admin/users/{userId}/role'].put.requestBody.content['application/json'].schema;
  expect(JSON.stringify(roleBody)).toContain('platform_admin');
});
