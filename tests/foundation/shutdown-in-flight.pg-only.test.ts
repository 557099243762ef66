import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../scripts/postgres-server.ts';
import { startStripeFake, type StripeFake } from '../stripe-fake/server.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';

/**
 * A SIGTERM (a rolling deploy, `docker stop`, Kubernetes) while a request is in flight: the request is answered before
 * the process exits (review 42: scripts/serve.ts closed the database and exited at once, and every request then in
 * flight, waiting on Stripe or between two queries, was dropped without an answer). Here an anonymous checkout waits
 * for Stripe's answer, held by the fake, when the signal comes; Stripe answers 300 ms later.
 */

let testDb: TestDatabase;
let child: ChildProcess | undefined;
let output = '';
let fake: StripeFake;
const dataDir = mkdtempSync(join(tmpdir(), 'mkt-shutdown-'));

beforeAll(async () => {
  testDb = await createTestDatabase();
  fake = await startStripeFake();
  await testDb.database.close();
});
afterAll(async () => {
  if (child && child.exitCode === null) child.kill('SIGKILL');
  await testDb?.drop().catch(() => {});
  await fake?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 120_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (child?.exitCode !== null && child?.exitCode !== undefined) throw new Error(`service exited before ${what}:\n${output}`);
    const v = await probe().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}:\n${output}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('SIGTERM while a request is in flight', () => {
  it('answers a request in flight (Stripe answers it 300 ms after the signal) before the process exits', async () => {
    const port = await freePort();
    const url = testDb.url!;
    child = spawn(process.execPath, ['--max-semi-space-size=4', 'scripts/serve.ts'], {
      env: {
        ...process.env,
        NODE_ENV: 'development',
        DATABASE_URL: url,
        DATA_DIR: dataDir,
        AUTH_SECRET: 'shutdown-test-auth-secret-0123456789abcdef',
        ADMIN_EMAIL: '',
        ADMIN_PASSWORD: '',
        PORT: String(port),
        ...fake.env(),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (d) => (output += d));
    child.stderr!.on('data', (d) => (output += d));
    const base = `http://127.0.0.1:${port}`;
    await until('/ready', async () => ((await fetch(`${base}/ready`)).status === 200 ? true : undefined));
    expect((await fetch(`${base}/agents`)).status).toBe(200);

    // A paid tier of the demo catalog (the seed writes it; its Stripe price is made on the first checkout).
    const sqlc = postgres(url, { max: 1, onnotice: () => {} });
    const [tier] = await sqlc<{ id: string }[]>`select id from public.tiers where price_cents > 0 and is_public and archived_at is null limit 1`;
    await sqlc.end();
    // A first checkout makes the tier's product and price at Stripe; the second is the one held in flight.
    const warm = await fetch(`${base}/checkout/anonymous`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ tierId: tier!.id }) });
    expect(warm.status).toBe(200);

    // Stripe takes a moment to answer the checkout session (held by the fake); SIGTERM comes meanwhile.
    const held = fake.hold('POST /v1/checkout/sessions');
    const inFlight = fetch(`${base}/checkout/anonymous`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ tierId: tier!.id }) }).then(
      async (r) => ({ status: r.status, body: await r.text() }),
      (err: Error) => ({ status: 0, body: `no answer: ${err.message} (${String((err.cause as Error | undefined)?.message ?? '')})` }),
    );
    await held.reached;
    const exited = new Promise<number | null>((r) => child!.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    held.release();

    const answer = await inFlight;
    expect(await exited).toBe(0);
    // The request in flight when the signal came is answered: Stripe answered 300 ms after the signal.
    expect(answer, answer.body + '\n' + output.split('\n').filter((l) => /shutting|error|warn/i.test(l)).join('\n')).toMatchObject({ status: 200 });
  }, 180_000);
});
