import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';

/** The metering responses in /openapi.json (that each operation is listed: tests/foundation/operations.test.ts). */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

describe('metering in /openapi.json', () => {
  it('documents the increment: 429 and 402, the quota headers, the request body', async () => {
    const res = await t.http.get('/openapi.json');
    expect(res.status).toBe(200);
    const paths = res.body.paths as Record<string, Record<string, { operationId?: string; responses?: Record<string, unknown> }>>;
    const increment = paths['/me/usage/{agentId}/{metricSlug}/increment']!.post as Record<string, any>;
    expect(increment.responses['429']).toBeDefined();
    expect(increment.responses['402']).toBeDefined();
    expect(Object.keys(increment.responses['200'].headers)).toEqual(['X-Quota-Limit', 'X-Quota-Remaining']);
    expect(increment.requestBody.content['application/json'].schema).toBeDefined();
  });
});
