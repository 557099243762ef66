import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin } from '../support/users.ts';

/**
 * docs/quickstart.md's script (examples/quickstart/quickstart.ts) runs as a new integrator would run it: its own
 * process, plain HTTP against the real service, an admin's email and password in the environment. It fails on any
 * unexpected answer; here it must finish, and what it reports must be what the database holds.
 */

const run = promisify(execFile);
const script = join(import.meta.dirname, '..', '..', 'examples', 'quickstart', 'quickstart.ts');

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

describe('examples/quickstart/quickstart.ts', () => {
  it('runs green end to end: admin setup, OAuth with PKCE, metering with a replay and a 429, refresh, revocation', async () => {
    const admin = await createAdmin(t);
    const { stdout } = await run(process.execPath, [script], {
      env: { ...process.env, MARKETPLACE_URL: t.baseUrl, ADMIN_EMAIL: admin.email, ADMIN_PASSWORD: admin.password },
      timeout: 60_000,
    });
    expect(stdout).toContain('replay 200: replayed true, X-Idempotent-Replay true, used 1');
    expect(stdout).toMatch(/429 QUOTA_EXCEEDED: 3 of 3 used; resets at \S+ \(Retry-After \d+ s\)/);
    expect(stdout).toContain('with the new access token: used 3, remaining 0');
    expect(stdout).toContain('refreshing with it now answers 400 invalid_grant');
    expect(stdout).toContain('Quickstart finished.');

    // What it printed is what was counted: 3 units on the new agent's metric, each once in the ledger.
    const agentId = /agent ([0-9a-f-]{36})/.exec(stdout)![1]!;
    const counted = await first<{ used: number; entries: number }>(
      t.db,
      sql`select c.used::int as used, (select count(*)::int from public.quota_ledger l where l.subscription_id = s.id and l.delta > 0) as entries
            from public.subscriptions s
            join public.usage_counters c on c.subscription_id = s.id
           where s.agent_id = ${agentId}`,
    );
    expect(counted).toEqual({ used: 3, entries: 2 });
  }, 90_000);
});
