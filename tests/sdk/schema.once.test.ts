import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { clientSchemaSource, SCHEMA_FILE } from '../../packages/client/scripts/schema.ts';
import { startTestApp, type TestApp } from '../support/app.ts';

/** The SDK's types are generated from /openapi.json: the committed file must be what the service describes now. */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

it('packages/client/src/schema.d.ts is up to date with /openapi.json (else: npm run gen:client)', async () => {
  const document = (await t.http.get('/openapi.json')).body;
  const expected = await clientSchemaSource(document);
  const committed = readFileSync(SCHEMA_FILE, 'utf8');
  expect(committed === expected, 'packages/client/src/schema.d.ts is stale: run npm run gen:client').toBe(true);
});
