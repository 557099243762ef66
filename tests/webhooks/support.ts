import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { sql } from '../../functions/platform/db.ts';
import { drainWebhookOutbox, type DrainOptions } from '../../functions/webhooks/drain.ts';
import type { TestApp } from '../support/app.ts';
import type { TestUser } from '../support/users.ts';

/**
 * An agent backend's webhook receiver, as a real HTTP server on a loopback port. It verifies every request with the
 * `standardwebhooks` library (the way docs/webhooks.md tells agent developers to), records what arrived, and answers
 * whatever the test tells it to: 2xx, 500 (an outage), or nothing at all until released (a slow receiver).
 */

export interface Received {
  /** path and query the request was sent to */
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** The verified payload, or undefined when verification failed (then `error` says why). */
  payload: { type: string; timestamp: string; data: Record<string, any> } | undefined;
  error: string | undefined;
  /** What the receiver answered. */
  status: number;
}

/** What the receiver answers: a status (and optionally the body of an error answer), or nothing until released. */
export type Mode = { status: number; body?: string } | 'hang';

export class Receiver {
  readonly received: Received[] = [];
  /** The secrets the receiver verifies with (set after createAgentWebhook answers). */
  secrets: string[] = [];
  mode: Mode = { status: 204 };
  private hanging: ServerResponse[] = [];
  private waiters: Array<{ count: number; resolve: () => void }> = [];

  private server: Server;
  readonly url: string;

  private constructor(server: Server, url: string) {
    this.server = server;
    this.url = url;
  }

  static async start(path = '/hooks/marketplace'): Promise<Receiver> {
    let receiver!: Receiver;
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => receiver.handle(req.url ?? '', req.headers, Buffer.concat(chunks).toString('utf8'), res));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    receiver = new Receiver(server, `http://127.0.0.1:${port}${path}`);
    return receiver;
  }

  private handle(url: string, headers: IncomingHttpHeaders, body: string, res: ServerResponse) {
    let payload: Received['payload'];
    let error: string | undefined;
    const errors: string[] = [];
    for (const secret of this.secrets) {
      try {
        payload = new Webhook(secret).verify(body, headers as Record<string, string>) as Received['payload'];
        break;
      } catch (err) {
        errors.push((err as Error).message);
      }
    }
    if (!payload) error = errors.join('; ') || 'no secret to verify with';
    const mode = this.mode;
    const status = mode === 'hang' ? 0 : error ? 400 : mode.status;
    this.received.push({ url, headers, body, payload, error, status });
    this.waiters = this.waiters.filter((w) => (this.received.length >= w.count ? (w.resolve(), false) : true));
    if (mode === 'hang') {
      this.hanging.push(res);
      return;
    }
    res.writeHead(status, { 'content-type': 'text/plain' }).end(status < 300 ? '' : error ? 'receiver is down' : (mode.body ?? 'receiver is down'));
  }

  /** Resolves once `count` requests have arrived in total. */
  arrived(count: number): Promise<void> {
    if (this.received.length >= count) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ count, resolve }));
  }

  /** Answers every request held by 'hang' mode. */
  release(status = 204) {
    for (const res of this.hanging.splice(0)) res.writeHead(status).end();
  }

  /** Verified payloads that the receiver accepted (2xx), in arrival order. */
  accepted() {
    return this.received.filter((r) => r.status >= 200 && r.status < 300).map((r) => r.payload!);
  }

  async close() {
    this.release(503);
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** Creates an endpoint over HTTP as the admin and points the receiver at its secret. */
export async function addEndpoint(
  t: TestApp,
  admin: TestUser,
  agentId: string,
  receiver: Receiver,
  events: string[] = ['subscription.created', 'subscription.updated', 'subscription.canceled', 'usage.threshold_reached', 'reservation.expired'],
) {
  const res = await t.http.post(`/admin/agents/${agentId}/webhooks`, { cookie: admin.cookie, json: { url: receiver.url, events } });
  if (res.status !== 201) throw new Error(`createAgentWebhook: ${res.status} ${res.text}`);
  receiver.secrets = [res.body.data.secret];
  return res.body.data as { id: string; secret: string; url: string; events: string[]; enabled: boolean };
}

/** One drain, as a scheduler or the Node loop would run it. */
export function drain(t: TestApp, options: DrainOptions = {}) {
  return drainWebhookOutbox(t.deps, options);
}

/** Deliveries of an endpoint as the admin API lists them (newest first). */
export async function deliveries(t: TestApp, admin: TestUser, agentId: string, webhookId: string, query = '') {
  const res = await t.http.get(`/admin/agents/${agentId}/webhooks/${webhookId}/deliveries${query}`, { cookie: admin.cookie });
  if (res.status !== 200) throw new Error(`listWebhookDeliveries: ${res.status} ${res.text}`);
  return res.body.data as Array<Record<string, any>>;
}

/** Moves the injected clock to the latest nextAttemptAt of the endpoint's pending deliveries (past the backoff). */
export async function passBackoff(t: TestApp, webhookId: string) {
  const { rows } = await sql<{ at: Date | null }>`select max(next_attempt_at) as at from public.webhook_deliveries
                                                   where endpoint_id = ${webhookId} and status = 'pending'
                                                     and next_attempt_at > '-infinity'`.execute(t.db);
  const at = rows[0]?.at;
  if (at && new Date(at) > t.clock.now()) t.clock.set(new Date(at));
}

/** Events the outbox holds for an agent (rows of public.webhook_events), oldest first. */
export async function outboxEvents(t: TestApp, agentId: string) {
  const { rows } = await sql<{ id: string; type: string; data: Record<string, any> }>`
    select id, type, data from public.webhook_events where agent_id = ${agentId} order by seq`.execute(t.db);
  return rows;
}
