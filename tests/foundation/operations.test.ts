import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { contractText, parseOperations, type ContractOperation } from '../support/contract.ts';

/**
 * "The OpenAPI document served at GET /openapi.json must list every operation below under the given operationId"
 * (contract.md): the one list of operations is the contract's own tables, read from shared/spec/contract.md
 * (beside the repository in CI and on the development machines; CI fails without it). Each must be in the
 * document with the contract's method and path and a 2xx response. This replaces the lists each domain's tests
 * used to keep by hand.
 */

/** Contract operations the document does not list yet, each reported; the test fails once one appears. */
const NOT_IN_DOCUMENT: Record<string, string> = {};

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t?.close());

interface Documented {
  method: string;
  path: string;
  responses: Record<string, unknown>;
}

async function documented(): Promise<Map<string, Documented>> {
  const doc = (await t.http.get('/openapi.json')).body as { paths: Record<string, Record<string, { operationId?: string; responses?: Record<string, unknown> }>> };
  const byId = new Map<string, Documented>();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (!op.operationId) continue;
      expect(byId.has(op.operationId), `operationId ${op.operationId} used twice`).toBe(false);
      byId.set(op.operationId, { method: method.toUpperCase(), path, responses: op.responses ?? {} });
    }
  }
  return byId;
}

describe('contract operations in /openapi.json', () => {
  const text = contractText();
  const operations: ContractOperation[] = text ? parseOperations(text) : [];

  it('reads the contract (shared/spec/contract.md beside the repository)', () => {
    if (process.env.CI) expect(text, 'CI runs with shared/ beside the repository').toBeDefined();
    if (text) expect(operations.length).toBeGreaterThan(90);
  });

  it('lists each operation under its operationId with the contract method and path, and a 2xx (or the 501 the contract gives) response', async () => {
    const byId = await documented();
    const problems: string[] = [];
    for (const op of operations) {
      const found = byId.get(op.operationId);
      if (op.operationId in NOT_IN_DOCUMENT) {
        expect(found, `${op.operationId} is documented now: remove it from NOT_IN_DOCUMENT`).toBeUndefined();
        continue;
      }
      if (!found) problems.push(`${op.operationId}: missing (${op.method} ${op.path})`);
      else if (found.method !== op.method || found.path !== op.path) problems.push(`${op.operationId}: ${found.method} ${found.path}, contract says ${op.method} ${op.path}`);
      // telemetry's contract answer is 501 NOT_IMPLEMENTED
      else if (!Object.keys(found.responses).some((s) => s.startsWith('2') || s === '501')) problems.push(`${op.operationId}: no 2xx (or 501) response`);
    }
    expect(problems).toEqual([]);
  });

  it('serves the operations it cannot list yet', async () => {
    const res = await t.http.get('/openapi.json');
    expect(res.status).toBe(200);
    expect(res.body.openapi).toBe('3.1.0');
  });
});
