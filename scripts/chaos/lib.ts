import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync } from 'node:fs';
import { createServer as createHttpServer, request as httpRequest, Agent, type IncomingMessage, type Server as HttpServer } from 'node:http';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { SMTPServer } from 'smtp-server';
import { Webhook } from 'standardwebhooks';

/**
 * The fault drill's moving parts (scripts/chaos/drill.ts): the proxies that put faults between the pieces, the
 * peers the service talks to, and the service instances as child processes. Nothing here is the service's own code.
 */

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- the service instances

export interface Instance {
  name: string;
  url: string;
  port: number;
  child: ChildProcess;
  logFile: string;
}

/**
 * The Node entry (scripts/serve.ts) as its own process group (so kill -9 reaches the server, not a wrapper), its
 * stdout and stderr in `logFile`. Resolves once GET /ready answers 200.
 */
export async function startInstance(name: string, port: number, env: Record<string, string>, logDir: string): Promise<Instance> {
  const url = `http://127.0.0.1:${port}`;
  const logFile = join(logDir, `${name}.log`);
  const log = createWriteStream(logFile, { flags: 'a' });
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/serve.ts'], {
    env: { ...process.env, ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  child.stdout!.pipe(log);
  child.stderr!.pipe(log);
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${name} exited with ${child.exitCode} (log: ${logFile})`);
    if (await fetch(`${url}/ready`).then((r) => r.ok, () => false)) return { name, url, port, child, logFile };
    if (Date.now() > deadline) throw new Error(`${name} did not become ready (log: ${logFile})`);
    await pause(200);
  }
}

/** SIGKILL to the instance's process group: the process ends mid-whatever, as a crashed container does. */
export function killInstance(instance: Instance): void {
  try {
    process.kill(-instance.child.pid!, 'SIGKILL');
  } catch {
    // already gone
  }
}

export async function stopInstance(instance: Instance): Promise<void> {
  if (instance.child.exitCode !== null || instance.child.signalCode !== null) return;
  const exited = new Promise((r) => instance.child.once('exit', r));
  try {
    process.kill(-instance.child.pid!, 'SIGTERM');
  } catch {
    return;
  }
  await Promise.race([exited, pause(20_000)]);
  killInstance(instance);
}

/** What an instance's log says: error lines (a 500 logs `unhandled error`) and the lost-connection warnings. */
export function logSummary(instance: Instance): { errors: number; unhandled: number; lostConnectionWarnings: number; firstError: string | undefined } {
  let errors = 0;
  let unhandled = 0;
  let lost = 0;
  let firstError: string | undefined;
  for (const line of readFileSync(instance.logFile, 'utf8').split('\n')) {
    if (!line.startsWith('{')) continue;
    let entry: { level?: string; msg?: string };
    try {
      entry = JSON.parse(line);
    } catch {
      continue;
    }
    if (entry.level === 'error') {
      errors++;
      firstError ??= line.slice(0, 400);
      if (entry.msg === 'unhandled error') unhandled++;
    }
    if (entry.level === 'warn' && /connection lost/.test(entry.msg ?? '')) lost++;
  }
  return { errors, unhandled, lostConnectionWarnings: lost, firstError };
}

// ---------------------------------------------------------------- the balancer

/**
 * A round-robin HTTP balancer in front of the instances, as a platform's load balancer: each request goes to the
 * next instance; an instance that refuses the connection is skipped (and left out for 2 s), so a dead instance
 * costs no request that it never received. A request whose instance dies after taking it gets 502 from the
 * balancer (marked `x-balancer: upstream-lost`), as nginx or an ALB answer then: counted apart from the service's
 * own answers.
 */
export class Balancer {
  upstreams: Array<{ url: URL; downUntil: number }> = [];
  private next = 0;
  private server: HttpServer;
  private agent = new Agent({ keepAlive: true, maxSockets: 64 });
  url = '';

  constructor() {
    this.server = createHttpServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => void this.forward(req, Buffer.concat(chunks), res));
    });
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  setUpstreams(urls: string[]) {
    this.upstreams = urls.map((u) => ({ url: new URL(u), downUntil: 0 }));
  }

  private async forward(req: IncomingMessage, body: Buffer, res: import('node:http').ServerResponse) {
    for (let tries = 0; tries < this.upstreams.length * 2; tries++) {
      const now = Date.now();
      const live = this.upstreams.filter((u) => u.downUntil <= now);
      const upstream = (live.length ? live : this.upstreams)[this.next++ % (live.length || this.upstreams.length)]!;
      const outcome = await new Promise<'refused' | 'done'>((resolve) => {
        let answered = false;
        const up = httpRequest(
          {
            host: upstream.url.hostname,
            port: upstream.url.port,
            method: req.method,
            path: req.url,
            headers: { ...req.headers, 'x-forwarded-for': req.socket.remoteAddress ?? '127.0.0.1' },
            agent: this.agent,
          },
          (upRes) => {
            answered = true;
            res.writeHead(upRes.statusCode ?? 502, upRes.headers);
            upRes.pipe(res);
            upRes.on('end', () => resolve('done'));
            upRes.on('error', () => {
              res.destroy();
              resolve('done');
            });
          },
        );
        up.on('error', (err: NodeJS.ErrnoException) => {
          if (answered) return;
          if (err.code === 'ECONNREFUSED') {
            upstream.downUntil = Date.now() + 2000;
            resolve('refused');
            return;
          }
          // The instance took the request and died (or reset): the balancer's own 502.
          if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain', 'x-balancer': 'upstream-lost' }).end(`upstream ${err.code}`);
          resolve('done');
        });
        up.end(body);
      });
      if (outcome === 'done') return;
    }
    res.writeHead(502, { 'content-type': 'text/plain', 'x-balancer': 'no-upstream' }).end('no instance answered');
  }

  async close() {
    this.server.closeAllConnections();
    this.agent.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

// ---------------------------------------------------------------- the network between the service and PostgreSQL

/** A TCP proxy in front of PostgreSQL whose connections can be reset (RST to the service's side), as a network does. */
export class CutProxy {
  private pairs = new Set<[Socket, Socket]>();
  private server: Server;
  port = 0;

  private target: { host: string; port: number };
  constructor(target: { host: string; port: number }) {
    this.target = target;
    this.server = createServer((client) => {
      const upstream = connect(this.target.port, this.target.host);
      const pair: [Socket, Socket] = [client, upstream];
      this.pairs.add(pair);
      client.pipe(upstream);
      upstream.pipe(client);
      const drop = () => {
        this.pairs.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      client.on('error', drop).on('close', drop);
      upstream.on('error', drop).on('close', drop);
    });
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  get connections() {
    return this.pairs.size;
  }

  /** Resets each open connection with probability `fraction`; returns how many. */
  cut(fraction = 1): number {
    let n = 0;
    for (const pair of [...this.pairs]) {
      if (Math.random() >= fraction) continue;
      this.pairs.delete(pair);
      pair[0].resetAndDestroy();
      pair[1].destroy();
      n++;
    }
    return n;
  }

  async close() {
    this.cut(1);
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

// ---------------------------------------------------------------- Stripe

/** An HTTP proxy in front of the Stripe fake that answers 500 (Stripe's own error shape) while `failing`. */
export class FaultyProxy {
  failing = false;
  served500 = 0;
  private server: HttpServer;
  url = '';

  private target: string;
  constructor(target: string) {
    this.target = target;
    this.server = createHttpServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (this.failing) {
          this.served500++;
          res.writeHead(500, { 'content-type': 'application/json', 'request-id': `req_chaos_${this.served500}` });
          res.end(JSON.stringify({ error: { type: 'api_error', message: 'An unknown error occurred (fault drill)' } }));
          return;
        }
        const t = new URL(this.target);
        const up = httpRequest({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
          res.writeHead(upRes.statusCode ?? 502, upRes.headers);
          upRes.pipe(res);
        });
        up.on('error', () => res.headersSent || res.writeHead(502).end());
        up.end(Buffer.concat(chunks));
      });
    });
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close() {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

// ---------------------------------------------------------------- SMTP

/** A real SMTP server on a fixed port that can be stopped (connections refused) and started again. */
export class MailSink {
  /** Recipient -> how many messages arrived for it. */
  readonly received = new Map<string, number>();
  private server: SMTPServer | undefined;

  readonly port: number;
  constructor(port: number) {
    this.port = port;
  }

  get url() {
    return `smtp://127.0.0.1:${this.port}`;
  }

  async start() {
    const server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS', 'AUTH'],
      logger: false,
      onData: (stream, session, callback) => {
        stream.on('data', () => {});
        stream.on('end', () => {
          for (const r of session.envelope.rcptTo) this.received.set(r.address.toLowerCase(), (this.received.get(r.address.toLowerCase()) ?? 0) + 1);
          callback();
        });
      },
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', () => resolve()));
    this.server = server;
  }

  async stop() {
    const server = this.server;
    this.server = undefined;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

// ---------------------------------------------------------------- agent webhooks

/** Agent backends' webhook receivers (one path per endpoint), verifying every message with its endpoint's secret. */
export class HookReceiver {
  /** webhook-id -> accepted (verified, answered 204) deliveries of it */
  readonly accepted = new Map<string, number>();
  rejected = 0;
  readonly secrets = new Map<string, string>();
  private server: HttpServer;
  url = '';

  constructor() {
    this.server = createHttpServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const secret = this.secrets.get(req.url ?? '');
        try {
          if (!secret) throw new Error('unknown endpoint');
          new Webhook(secret).verify(Buffer.concat(chunks).toString('utf8'), req.headers as Record<string, string>);
        } catch {
          this.rejected++;
          res.writeHead(400).end();
          return;
        }
        const id = String(req.headers['webhook-id']);
        this.accepted.set(id, (this.accepted.get(id) ?? 0) + 1);
        res.writeHead(204).end();
      });
    });
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close() {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
