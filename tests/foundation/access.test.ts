import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { contractText, parseOperations, type ContractOperation } from '../support/contract.ts';
import { accessTokenFor } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';

/**
 * The access column of every contract operation (read from contract.md, so no operation is left out: getAnalytics,
 * listUsers, getUserProfile and listSubscriptions included), tried by each kind of caller: admin operations answer
 * 401 to the signed-out and 403 to a user and to an agent's bearer token (contract.md, Trust boundaries), user
 * operations 401 to the signed-out, usage writes 403 to a cookie (even an admin's), and an admin is never refused.
 * Ids in paths are unknown, so nothing is changed. A body of the wrong shape may be refused (400) before access is
 * decided: that answer is accepted only for operations with a body, and is never a success.
 */

const UNKNOWN = '00000000-0000-4000-8000-000000000000';
const fillPath = (op: ContractOperation) => op.path.replace('{metricSlug}', 'calls').replace('{sessionId}', 'cs_test_unknown').replace('{slug}', 'no-such-agent').replace(/\{[^}]+\}/g, UNKNOWN);
const hasBody = (op: ContractOperation) => op.method !== 'GET' && op.method !== 'DELETE';

let t: TestApp;
let admin: TestUser;
let user: TestUser;
let bearer: string;
const operations = (() => {
  const text = contractText();
  if (!text && process.env.CI) throw new Error('CI runs with shared/spec/contract.md beside the repository');
  return text ? parseOperations(text) : [];
})();

beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  user = await signUp(t);
  const agent = await t.http.post('/agents', {
    cookie: admin.cookie,
    json: { slug: 'access-agent', name: 'Access', description: 'x', status: 'active', redirectUris: ['http://127.0.0.1:9/callback'] },
  });
  expect(agent.status, agent.text).toBe(201);
  bearer = (await accessTokenFor(t, user, { agentId: agent.body.data.id })).accessToken;
}, 60_000);
afterAll(() => t?.close());

async function call(op: ContractOperation, auth: { cookie?: string; bearer?: string }) {
  const res = await t.http.call(op.method, fillPath(op), { ...auth, ...(hasBody(op) ? { json: {} } : {}) });
  return { status: res.status, code: res.body?.error?.code as string | undefined };
}

/** The expected refusal, or a 400 VALIDATION_ERROR for an operation whose body was checked first. */
function refused(op: ContractOperation, got: { status: number; code?: string | undefined }, status: 401 | 403): boolean {
  const code = status === 401 ? 'UNAUTHORIZED' : 'FORBIDDEN';
  return (got.status === status && got.code === code) || (hasBody(op) && got.status === 400 && got.code === 'VALIDATION_ERROR');
}

describe('access of every contract operation', () => {
  it('covers the admin operations the old hand-kept lists missed', () => {
    if (!operations.length) return;
    const admins = operations.filter((o) => o.access.startsWith('admin')).map((o) => o.operationId);
    expect(admins).toEqual(expect.arrayContaining(['getAnalytics', 'listUsers', 'getUserProfile', 'listSubscriptions', 'banUser', 'createAgent']));
  });

  it('admin operations: 401 signed out, 403 to a user and to an agent token, never refused to an admin', async () => {
    const problems: string[] = [];
    for (const op of operations.filter((o) => o.access.startsWith('admin'))) {
      const anonymous = await call(op, {});
      const asUser = await call(op, { cookie: user.cookie });
      const asAgent = await call(op, { bearer });
      const asAdmin = await call(op, { cookie: admin.cookie });
      if (!refused(op, anonymous, 401)) problems.push(`${op.operationId} signed out: ${anonymous.status} ${anonymous.code}`);
      if (!refused(op, asUser, 403)) problems.push(`${op.operationId} user: ${asUser.status} ${asUser.code}`);
      if (!refused(op, asAgent, 403)) problems.push(`${op.operationId} agent token: ${asAgent.status} ${asAgent.code}`);
      if (asAdmin.status === 401 || asAdmin.status === 403) problems.push(`${op.operationId} admin: ${asAdmin.status}`);
    }
    expect(problems).toEqual([]);
  });

  it('user operations: 401 signed out; usage writes: 403 to any cookie, an admin\'s too', async () => {
    const problems: string[] = [];
    for (const op of operations.filter((o) => o.access.startsWith('user') || o.access.startsWith('bearer'))) {
      const anonymous = await call(op, {});
      if (!refused(op, anonymous, 401)) problems.push(`${op.operationId} signed out: ${anonymous.status} ${anonymous.code}`);
      if (!op.access.startsWith('bearer')) continue;
      for (const [who, cookie] of [['user', user.cookie], ['admin', admin.cookie]] as const) {
        const got = await call(op, { cookie });
        if (!refused(op, got, 403)) problems.push(`${op.operationId} ${who} cookie: ${got.status} ${got.code}`);
      }
    }
    expect(problems).toEqual([]);
  });
});
