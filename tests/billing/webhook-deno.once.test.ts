import { spawn } from 'node:child_process';
import { join } from 'node:path';
import Stripe from 'stripe';
import { describe, expect, it } from 'vitest';

/**
 * The webhook's signature check on the edge runtime: Deno runs tests/billing/deno-verify.ts through the edge
 * import map (supabase/functions/api/deno.json, as the Supabase bundler would), so the app's Stripe client is
 * the SDK's worker build with WebCrypto. A genuine signature verifies; a tampered payload and a foreign secret
 * do not. (The Node side of the same code is covered by every webhook test.)
 */
const root = join(import.meta.dirname, '..', '..');

function runDeno(input: unknown): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(
      join(root, 'node_modules', '.bin', 'deno'),
      ['run', '--no-check', '--quiet', '--allow-env', '--config', join(root, 'supabase', 'functions', 'api', 'deno.json'), join(root, 'tests', 'billing', 'deno-verify.ts')],
      {
        cwd: root,
        env: {
          ...process.env,
          DENO_NO_PACKAGE_JSON: '1',
          DENO_NO_UPDATE_CHECK: '1',
          DENO_DIR: process.env.DENO_DIR ?? join(root, 'node_modules', '.cache', 'deno'),
          NO_COLOR: '1',
          VERIFY_INPUT: JSON.stringify(input),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    child.on('exit', (code) => resolve({ code, output }));
  });
}

describe('webhook signature check under Deno', () => {
  it('verifies a genuine Stripe signature and rejects tampered or foreign ones', async () => {
    const secret = 'whsec_deno_edge_check';
    const payload = JSON.stringify({ id: 'evt_deno_1', object: 'event', type: 'customer.subscription.updated', data: { object: { id: 'sub_1' } } });
    const header = await Stripe.webhooks.generateTestHeaderStringAsync({ payload, secret });
    const foreign = await Stripe.webhooks.generateTestHeaderStringAsync({ payload, secret: 'whsec_other' });
    const { code, output } = await runDeno({
      secret,
      cases: [
        { payload, header },
        { payload: payload.replace('sub_1', 'sub_2'), header },
        { payload, header: foreign },
      ],
    });
    expect(code, output).toBe(0);
    expect(output.trim().split('\n')).toEqual(['verified evt_deno_1', 'rejected', 'rejected']);
  }, 120_000);
});
