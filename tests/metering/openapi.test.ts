import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';

/** Every metering operation of contract.md is in /openapi.json under its operationId, with its method and path. */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const operations: Array<[string, string, string]> = [
  ['listMetricDefinitions', 'get', '/agents/{agentId}/metric-definitions'],
  ['createMetricDefinition', 'post', '/agents/{agentId}/metric-definitions'],
  ['getMetricDefinition', 'get', '/agents/{agentId}/metric-definitions/{metricId}'],
  ['updateMetricDefinition', 'patch', '/agents/{agentId}/metric-definitions/{metricId}'],
  ['deleteMetricDefinition', 'delete', '/agents/{agentId}/metric-definitions/{metricId}'],
  ['listTierQuotas', 'get', '/agents/{agentId}/pricing/{tierId}/quotas'],
  ['upsertTierQuota', 'put', '/agents/{agentId}/pricing/{tierId}/quotas/{metricId}'],
  ['deleteTierQuota', 'delete', '/agents/{agentId}/pricing/{tierId}/quotas/{metricId}'],
  ['incrementUsage', 'post', '/me/usage/{agentId}/{metricSlug}/increment'],
  ['decrementUsage', 'post', '/me/usage/{agentId}/{metricSlug}/decrement'],
  ['listMyUsage', 'get', '/me/usage/{agentId}'],
  ['getMyUsage', 'get', '/me/usage/{agentId}/{metricSlug}'],
  ['grantAddon', 'post', '/admin/subscriptions/{subscriptionId}/addons'],
  ['listAddons', 'get', '/admin/subscriptions/{subscriptionId}/addons'],
  ['revokeAddon', 'post', '/admin/subscriptions/{subscriptionId}/addons/{addonId}/revoke'],
  ['listQuotaLedger', 'get', '/admin/subscriptions/{subscriptionId}/ledger'],
  ['getSubscriptionUsage', 'get', '/admin/subscriptions/{subscriptionId}/usage'],
];

describe('metering in /openapi.json', () => {
  it('lists every metering operation with request and response schemas', async () => {
    const res = await t.http.get('/openapi.json');
    expect(res.status).toBe(200);
    const paths = res.body.paths as Record<string, Record<string, { operationId?: string; responses?: Record<string, unknown> }>>;
    for (const [operationId, method, path] of operations) {
      const op = paths[path]?.[method];
      expect(op?.operationId, `${method.toUpperCase()} ${path}`).toBe(operationId);
      expect(Object.keys(op?.responses ?? {}).some((s) => s.startsWith('2')), operationId).toBe(true);
    }
    const increment = paths['/me/usage/{agentId}/{metricSlug}/increment']!.post as Record<string, any>;
    expect(increment.responses['429']).toBeDefined();
    expect(increment.responses['402']).toBeDefined();
    expect(Object.keys(increment.responses['200'].headers)).toEqual(['X-Quota-Limit', 'X-Quota-Remaining']);
    expect(increment.requestBody.content['application/json'].schema).toBeDefined();
  });
});
