import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { drainWebhookOutbox } from '../../functions/webhooks/drain.ts';
import { insertAgent } from '../support/fixtures.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, type TestUser } from '../support/users.ts';

/**
 * One agent cannot crowd other agents out of the webhook drain (review 83). A receiver that answers at once, with a
 * backlog its own backend can make (each hold left to expire is a `reservation.expired`), claimed its next delivery the
 * moment the last was answered, while another agent's receiver that answers in a few hundred ms waited on its first:
 * the fast one took nearly the whole limit of every drain, the other got a few deliveries per drain, its events piled
 * up, and 72 hours on they were failed unsent, though its receiver never failed. Each endpoint now has its share of a
 * drain's limit. PostgreSQL only: the embedded database serves one statement at a time, so the attempts interleave less.
 */
let t: TestApp;
let admin: TestUser;
const servers: Array<ReturnType<typeof createServer>> = [];
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterEach(async () => {
  await sql`delete from public.webhook_endpoints`.execute(t.db);
});
afterAll(async () => {
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
  await t.close();
});

/** A receiver that answers 204 after `delayMs`, counting what it got. */
async function receiver(delayMs: number) {
  const got: string[] = [];
  const s = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      got.push(String(req.headers['webhook-id']));
      setTimeout(() => res.writeHead(204).end(), delayMs);
    });
  });
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}/hook`, got };
}

async function endpointFor(agentId: string, url: string): Promise<string> {
  const res = await t.http.post(`/admin/agents/${agentId}/webhooks`, { cookie: admin.cookie, json: { url, events: ['reservation.expired'] } });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id;
}

/** n events of the agent, as every cause writes them (public.webhook_emit). */
async function events(agentId: string, n: number) {
  await sql`select public.webhook_emit(${agentId}::uuid, 'reservation.expired', '{}'::jsonb, ${t.clock.now()}::timestamptz)
            from generate_series(1, ${n})`.execute(t.db);
}

const HOUR = 3_600_000;

describe("another agent's fast receiver and a drain's limit", () => {
  it('an endpoint alone has the whole limit', { timeout: 60_000 }, async () => {
    const agent = await insertAgent(t.db);
    const fast = await receiver(0);
    await endpointFor(agent.id, fast.url);
    await events(agent.id, 150);
    expect((await drainWebhookOutbox(t.deps, { limit: 100 })).attempted).toBe(100);
    expect(fast.got).toHaveLength(100);
  });

  it('attack: an honest receiver gets its due deliveries in a drain beside a fast one with a backlog', { timeout: 60_000 }, async () => {
    const [hostile, honest] = [await insertAgent(t.db), await insertAgent(t.db)];
    const [fast, normal] = [await receiver(0), await receiver(200)];
    await endpointFor(hostile.id, fast.url);
    await endpointFor(honest.id, normal.url);
    await events(hostile.id, 1000);
    await events(honest.id, 10);
    const result = await drainWebhookOutbox(t.deps, { limit: 100 });
    // the honest receiver's ten, and the rest of the limit (not more) to the backlog once the honest one had no more
    expect({ honest: normal.got.length, hostile: fast.got.length, attempted: result.attempted }).toEqual({ honest: 10, hostile: 90, attempted: 100 });
  });

  it("attack: an honest receiver that always answers 2xx loses no event to another agent's backlog over days", { timeout: 120_000 }, async () => {
    const [hostile, honest] = [await insertAgent(t.db), await insertAgent(t.db)];
    const [fast, normal] = [await receiver(0), await receiver(100)];
    await endpointFor(hostile.id, fast.url);
    const honestEndpoint = await endpointFor(honest.id, normal.url);
    const start = Date.now() - 110 * HOUR;
    // time compressed: a drain of 100 a day; each day 20 events of the honest agent (one drain takes them all when it
    // is alone) and 400 of the other
    for (let hours = 0; hours <= 96; hours += 24) {
      t.clock.set(new Date(start + hours * HOUR));
      await events(hostile.id, 400);
      await events(honest.id, 20);
      await drainWebhookOutbox(t.deps, { limit: 100 });
    }
    const { rows } = await sql<{ status: string; n: number }>`
      select status, count(*)::int as n from public.webhook_deliveries where endpoint_id = ${honestEndpoint} group by status order by status`.execute(t.db);
    expect(rows).toEqual([{ status: 'delivered', n: 100 }]);
  });
});

describe('the share makes room for others, and only for others with something due (review 85)', () => {
  it('a drain does not stop with its limit unused while a busy endpoint has due deliveries', { timeout: 60_000 }, async () => {
    const [busy, quiet] = [await insertAgent(t.db), await insertAgent(t.db)];
    const [a, b] = [await receiver(0), await receiver(0)];
    await endpointFor(busy.id, a.url);
    await endpointFor(quiet.id, b.url);
    await events(busy.id, 150);
    await events(quiet.id, 1);
    const result = await drainWebhookOutbox(t.deps, { limit: 100 });
    expect({ attempted: result.attempted, busy: a.got.length, quiet: b.got.length }).toEqual({ attempted: 100, busy: 99, quiet: 1 });
  });

  it("attack: the backlog does not take the slots an honest receiver's next deliveries need while it answers its first", { timeout: 60_000 }, async () => {
    const [hostile, honest] = [await insertAgent(t.db), await insertAgent(t.db)];
    const [fast, slow] = [await receiver(0), await receiver(100)];
    await endpointFor(hostile.id, fast.url);
    await endpointFor(honest.id, slow.url);
    await events(hostile.id, 1000);
    await events(honest.id, 40);
    const result = await drainWebhookOutbox(t.deps, { limit: 100 });
    // the honest endpoint's 40 (within its share of 50) one after another, the backlog its share and then what is left
    expect({ honest: slow.got.length, hostile: fast.got.length, attempted: result.attempted }).toEqual({ honest: 40, hostile: 60, attempted: 100 });
  });

  it("attack: a busy agent whose receiver always answers at once loses events to another agent's single event per drain", { timeout: 120_000 }, async () => {
    const [busy, quiet] = [await insertAgent(t.db), await insertAgent(t.db)];
    const [a, b] = [await receiver(0), await receiver(0)];
    const busyEndpoint = await endpointFor(busy.id, a.url);
    await endpointFor(quiet.id, b.url);
    const start = Date.now() - 200 * HOUR;
    // time compressed: one drain of 100 a day; each day 80 events of the busy agent (within the limit) and 1 of another
    for (let hours = 0; hours <= 144; hours += 24) {
      t.clock.set(new Date(start + hours * HOUR));
      await events(busy.id, 80);
      await events(quiet.id, 1);
      await drainWebhookOutbox(t.deps, { limit: 100 });
    }
    const { rows } = await sql<{ status: string; n: number }>`
      select status, count(*)::int as n from public.webhook_deliveries where endpoint_id = ${busyEndpoint} group by status order by status`.execute(t.db);
    expect(rows.filter((r) => r.status === 'failed')).toEqual([]);
  });
});
