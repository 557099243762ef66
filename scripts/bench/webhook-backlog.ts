import { createServer } from 'node:http';
import { startPostgres } from '../postgres-server.ts';
import { systemClock } from '../../functions/platform/clock.ts';
import { openPostgres, sql } from '../../functions/platform/db.ts';
import { createLogger } from '../../functions/platform/logger.ts';
import { migrate } from '../../functions/platform/migrations.ts';
import { drainWebhookOutbox } from '../../functions/webhooks/drain.ts';
import { createWebhook } from '../../functions/webhooks/endpoints.ts';
import type { Config } from '../../functions/platform/config.ts';
import { BENCH_AUTH_SECRET, percentile } from './lib.ts';

/**
 * `npx tsx scripts/bench/webhook-backlog.ts [backlogs...]`: what one agent's failing webhook endpoint costs every
 * other agent's deliveries. Agent A's endpoint is failing: its first delivery waits for its next retry and its
 * backlog (deliveries that may not go before it, per-endpoint order) grows with every event A's own backend causes,
 * e.g. reservations it lets expire. Agent B has one delivery due. For each backlog size, the time of a drain that
 * sends B's delivery to a local receiver (the claim, the HTTP attempt, the outcome), median and max of 20 drains.
 * Before the claim read one head per endpoint, every claim walked A's whole backlog. Then A's endpoint comes back:
 * the time of a drain that sends A's own next delivery, with the rest of the backlog still behind it (recording an
 * attempt fails those behind it whose time is over: before migration 20261127004500 that step read the whole backlog
 * on every attempt, review 31). PostgreSQL 15, not durable (the reads are measured, not commits). Figures are
 * printed, never asserted.
 */

const backlogs = (process.argv.slice(2).length ? process.argv.slice(2) : ['0', '10000', '100000']).map(Number);
const DRAINS = 20;

async function main() {
  const receiver = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(204).end());
  }).listen(0, '127.0.0.1');
  await new Promise((r) => receiver.once('listening', r));
  const receiverUrl = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hook`;
  const server = await startPostgres();
  const database = openPostgres(server.url, { max: 4 });
  const db = database.db;
  try {
    await migrate(database);
    // (createWebhook and the drain read only authSecret of the config)
    const deps = { database, clock: systemClock, logger: createLogger({ level: 'error' }), config: { authSecret: BENCH_AUTH_SECRET } };
    // through the service's own createWebhook (the secret sealed to the endpoint's id, as the drain opens it)
    const endpoint = async (agentSlug: string) => {
      const { rows } = await sql<{ id: string }>`
        insert into agents (slug, name, status) values (${agentSlug}, ${agentSlug}, 'active') returning id`.execute(db);
      const agentId = rows[0]!.id;
      const created = await createWebhook({ ...deps, config: deps.config as Config }, agentId, { url: receiverUrl, events: ['reservation.expired'] });
      return { agentId, endpointId: created.id };
    };
    /** `n` pending deliveries to the endpoint, never attempted (next_attempt_at -infinity), in event order. */
    const deliveries = async (to: { agentId: string; endpointId: string }, n: number) => {
      await sql`
        with ev as (
          insert into webhook_events (agent_id, type, data, occurred_at)
          select ${to.agentId}, 'reservation.expired', '{}'::jsonb, now() from generate_series(1, ${n})
          returning id, seq)
        insert into webhook_deliveries (id, endpoint_id, event_id, event_seq, created_at)
        select public.webhook_delivery_id(now()), ${to.endpointId}, ev.id, ev.seq, now() from ev`.execute(db);
    };

    const failing = await endpoint('bench-failing');
    const healthy = await endpoint('bench-healthy');
    // A's head: attempted and failed, its retry not due for an hour; the rest of A's backlog waits behind it
    const failingHead = () => sql`
      update webhook_deliveries set attempts = 5, first_attempt_at = now(), next_attempt_at = now() + interval '1 hour'
       where id = (select id from webhook_deliveries where endpoint_id = ${failing.endpointId} and status = 'pending'
                    order by event_seq limit 1)`.execute(db);
    await deliveries(failing, 1);
    await failingHead();
    await sql`update webhook_endpoints set failing_since = now() where id = ${failing.endpointId}`.execute(db);
    let backlog = 0;
    console.log(`${DRAINS} drains per backlog, each sending agent B's one due delivery; agent A's endpoint failing\n`);
    const table: Array<Record<string, number>> = [];
    for (const size of backlogs.sort((a, b) => a - b)) {
      await deliveries(failing, size - backlog);
      backlog = size;
      await sql`vacuum analyze webhook_deliveries`.execute(db);
      const times: number[] = [];
      for (let i = 0; i < DRAINS; i++) {
        await deliveries(healthy, 1);
        const started = performance.now();
        const result = await drainWebhookOutbox(deps, { limit: 1 });
        times.push(performance.now() - started);
        if (result.delivered !== 1) throw new Error(`agent B's delivery was not delivered: ${JSON.stringify(result)}`);
      }
      times.sort((a, b) => a - b);
      // A back: its head due now; each drain sends A's next delivery (one at a time per endpoint, in order). DRAINS
      // more are queued at the end first, so the backlog behind stays `size` however small it is.
      await deliveries(failing, DRAINS);
      await sql`update webhook_deliveries set next_attempt_at = now() - interval '1 second'
                 where endpoint_id = ${failing.endpointId} and status = 'pending' and attempts > 0`.execute(db);
      const own: number[] = [];
      for (let i = 0; i < DRAINS; i++) {
        const started = performance.now();
        const result = await drainWebhookOutbox(deps, { limit: 1 });
        own.push(performance.now() - started);
        if (result.delivered !== 1) throw new Error(`agent A's delivery was not delivered: ${JSON.stringify(result)}`);
      }
      own.sort((a, b) => a - b);
      await failingHead();
      const row = {
        "agent A's backlog": size,
        'B drain p50 ms': round(percentile(times, 50)),
        'B drain max ms': round(times.at(-1)!),
        'A back: drain p50 ms': round(percentile(own, 50)),
        'A back: drain max ms': round(own.at(-1)!),
      };
      console.log(row);
      table.push(row);
    }
    console.table(table);
  } finally {
    await database.close();
    server.stop();
    receiver.close();
  }
}

const round = (n: number) => Math.round(n * 100) / 100;

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
