import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';

/** The identity schemas in /openapi.json (that each operation is listed is tests/foundation/operations.test.ts). */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

it('documents the role a user may be given (operations, methods and paths: tests/foundation/operations.test.ts)', async () => {
  const doc = (await t.http.get('/openapi.json')).body;
  const roleBody = doc.paths['/admin/users/{userId}/role'].put.requestBody.content['application/json'].schema;
  expect(JSON.stringify(roleBody)).toContain('platform_admin');
});
