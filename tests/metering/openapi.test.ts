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
    expect(Object.keys(increment.responses['200'].headers)).toEqual(['X-Quota-Limit', 'X-Quota-Remaining', 'X-Idempotent-Replay']);
    expect(increment.requestBody.content['application/json'].schema).toBeDefined();
  });

  it('declares the quota headers on every usage write response, and the quota 429 apart from the rate-limit 429', async () => {
    const doc = (await t.http.get('/openapi.json')).body as Record<string, any>;
    const usageWrites = Object.entries(doc.paths as Record<string, Record<string, any>>)
      .filter(([path]) => path.startsWith('/me/usage/'))
      .flatMap(([path, ops]) => Object.entries(ops).filter(([method]) => method === 'post').map(([, op]) => [path, op] as const));
    expect(usageWrites.map(([, op]) => op.operationId).sort()).toEqual(
      ['commitReservation', 'decrementUsage', 'incrementUsage', 'releaseReservation', 'reserveUsage'].sort(),
    );
    for (const [path, op] of usageWrites) {
      const success = Object.entries(op.responses as Record<string, any>).find(([status]) => status.startsWith('2'))![1];
      expect(Object.keys(success.headers ?? {}), path).toEqual(expect.arrayContaining(['X-Quota-Limit', 'X-Quota-Remaining', 'X-Idempotent-Replay']));
    }
    const schemas = doc.components.schemas as Record<string, any>;
    const tooManyOf = (id: string) => usageWrites.find(([, op]) => op.operationId === id)![1].responses['429'];
    for (const id of ['incrementUsage', 'reserveUsage']) {
      expect(Object.keys(tooManyOf(id).headers)).toEqual(expect.arrayContaining(['X-Quota-Limit', 'X-Quota-Remaining', 'Retry-After']));
    }
    expect(tooManyOf('incrementUsage').content['application/json'].schema.$ref).toBe('#/components/schemas/QuotaExceededError');
    // a reserve is also refused on a counter with 1,000 live holds: RATE_LIMITED, the other schema
    const reserveSchema = tooManyOf('reserveUsage').content['application/json'].schema;
    expect((reserveSchema.anyOf ?? reserveSchema.oneOf).map((s: { $ref: string }) => s.$ref).sort()).toEqual([
      '#/components/schemas/QuotaExceededError',
      '#/components/schemas/RateLimitedError',
    ]);
    const quota = schemas.QuotaExceededError.properties.error.properties;
    expect(quota.code.enum).toEqual(['QUOTA_EXCEEDED']);
    expect(Object.keys(quota.details.properties)).toEqual(
      expect.arrayContaining(['metric', 'used', 'reserved', 'limit', 'requested', 'periodEnd', 'replayed']),
    );
    // a rate-limited route's 429 is the other schema, with its own Retry-After
    const rateLimited = Object.values(doc.paths as Record<string, Record<string, any>>)
      .flatMap((ops) => Object.values(ops))
      .map((op) => op.responses?.['429'])
      .filter((r) => r && r.content['application/json'].schema.$ref === '#/components/schemas/RateLimitedError');
    expect(rateLimited.length).toBeGreaterThan(0);
    expect(schemas.RateLimitedError.properties.error.properties.code.enum).toEqual(['RATE_LIMITED']);
  });
});
