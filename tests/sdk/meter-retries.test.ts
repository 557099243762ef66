import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApiError, createMeter, createOAuth, NetworkError, NotFoundError } from '@agent-marketplace/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor, clientOfAgent } from '../support/oauth.ts';
import { signUp } from '../support/users.ts';
import { agentToken, ledgerAgreesWithCounters, meteredAgent, subscribe, type MeteredAgent } from '../metering/support.ts';

/**
 * createMeter's renewal, timeout and retries as packages/client/README.md describes them (found by a review of the
 * SDK): usage() renews a refused token like the writes; every attempt is bounded by timeoutMs, and an attempt past it
 * is a network error, retried with the same clientReqId; 502, 503 and 504 are retried (waiting Retry-After, at most
 * maxDelayMs), never a 4xx; an error keeps the answer's Retry-After. The marketplace is the real service; a gateway
 * (a small node:http server in front of it) stands for the network: it loses answers, answers 502/503/504 itself,
 * or holds the connection without answering.
 */

let t: TestApp;
let agent: MeteredAgent;

beforeAll(async () => {
  t = await startTestApp();
  agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 50 }]);
});
afterAll(() => t?.close());

/** What the gateway does with one request: pass it to the service, answer it itself, or hold it. */
type Step =
  /** To the service; its answer is sent back after `delayMs`, or replaced by `status` (the service did the call). */
  | { forward: true; delayMs?: number; status?: number; headers?: Record<string, string> }
  /** Answered by the gateway without reaching the service. */
  | { status: number; headers?: Record<string, string>; body?: string }
  /** Read and never answered (a partition, a stuck proxy). */
  | { silent: true }
  /** Headers and half a body sent, then nothing more. */
  | { stall: true };

/** A gateway in front of the service: each request takes the next step; with none left, requests pass through. */
class Gateway {
  readonly arrivals: Array<{ at: number; body: string }> = [];
  readonly steps: Step[] = [];
  private server: Server;
  readonly url: string;
  private constructor(server: Server, url: string) {
    this.server = server;
    this.url = url;
  }

  static async start(target: string, steps: Step[] = []): Promise<Gateway> {
    let gateway!: Gateway;
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => void gateway.handle(target, req, res, Buffer.concat(chunks).toString('utf8')));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    gateway = new Gateway(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    gateway.steps.push(...steps);
    return gateway;
  }

  private async handle(target: string, req: IncomingMessage, res: ServerResponse, body: string) {
    this.arrivals.push({ at: Date.now(), body });
    const step: Step = this.steps.shift() ?? { forward: true };
    if ('silent' in step) return;
    if ('stall' in step) {
      res.writeHead(200, { 'content-type': 'application/json' }).write('{"status":"success","data":');
      return;
    }
    if (!('forward' in step)) {
      res.writeHead(step.status, step.headers).end(step.body ?? '');
      return;
    }
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && k !== 'host' && k !== 'content-length') headers.set(k, v);
    const answer = await fetch(`${target}${req.url}`, { method: req.method, headers, body: req.method === 'GET' ? undefined : body });
    const text = await answer.text();
    if (step.delayMs) await new Promise((resolve) => setTimeout(resolve, step.delayMs));
    if (res.destroyed || req.socket.destroyed) return; // the client gave up waiting
    if (step.status) res.writeHead(step.status, { 'content-type': 'text/html', ...step.headers }).end('<html>Bad Gateway</html>');
    else res.writeHead(answer.status, Object.fromEntries(answer.headers)).end(text);
  }

  clientReqIds(): string[] {
    return this.arrivals.map((a) => JSON.parse(a.body).clientReqId as string);
  }

  async close() {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

const unavailable = (retryAfter: string): Step => ({
  status: 503,
  headers: { 'content-type': 'application/json', 'retry-after': retryAfter },
  body: JSON.stringify({
    status: 'error',
    data: null,
    error: { code: 'UNAVAILABLE', message: 'This usage counter is locked by another change right now', details: { reason: 'counter_locked' } },
  }),
});

async function subscribedUser() {
  const user = await signUp(t);
  const sub = await subscribe(t, user.userId, agent.tierId);
  return { user, sub, token: await agentToken(t, user, agent.agentId) };
}

describe('usage() is one of the meter calls', () => {
  it('after a 401 it asks the token function once more (rejected: the refused token) and reads with the fresh token', async () => {
    // The user signs out of the marketplace: the access token stops working, the refresh token still works. usage()
    // sent the refused token once and threw 401 UNAUTHORIZED, the token function never asked again.
    const user = await signUp(t);
    await subscribe(t, user.userId, agent.tierId);
    let tokens = await accessTokenFor(t, user, { agentId: agent.agentId });
    const client = await clientOfAgent(t, agent.agentId);
    const signIn = createOAuth({
      issuer: `${t.baseUrl}/api/auth`,
      clientId: client.clientId,
      clientSecret: client.clientSecret,
      redirectUri: client.redirectUri,
      allowInsecureHttp: true,
    });
    expect((await t.http.post('/api/auth/sign-out', { cookie: user.cookie, headers: { origin: t.baseUrl } })).status).toBe(200);
    const asks: Array<string | undefined> = [];
    const meter = createMeter({
      baseUrl: t.baseUrl,
      agentId: agent.agentId,
      maxDelayMs: 20,
      accessToken: async ({ rejected }) => {
        asks.push(rejected);
        if (rejected === tokens.accessToken) {
          const fresh = await signIn.refresh(tokens.refreshToken);
          tokens = { ...tokens, accessToken: fresh.accessToken, refreshToken: fresh.refreshToken ?? tokens.refreshToken };
        }
        return tokens.accessToken;
      },
    });
    const read = await meter.usage('calls');
    expect(read).toMatchObject({ metric: 'calls', used: 0, limit: 50 });
    expect(asks).toEqual([undefined, expect.any(String)]);
  });

  it('is retried through a gateway 502 and an attempt that timed out, and answers', async () => {
    const { token } = await subscribedUser();
    const gateway = await Gateway.start(t.baseUrl, [{ status: 502, body: 'Bad Gateway' }, { silent: true }]);
    try {
      // The last attempt reaches the service itself: its bound leaves room for a loaded machine (200 ms timed it out).
      const meter = createMeter({ baseUrl: gateway.url, agentId: agent.agentId, accessToken: token, timeoutMs: 2_000, maxDelayMs: 20 });
      await expect(meter.usage('calls')).resolves.toMatchObject({ metric: 'calls', used: 0 });
      expect(gateway.arrivals).toHaveLength(3);
    } finally {
      await gateway.close();
    }
  });
});

describe('timeoutMs bounds every attempt', () => {
  it('a marketplace that accepts the connection and never answers: each attempt ends after timeoutMs, retried with the same clientReqId, then NetworkError', async () => {
    // Without a bound the call waited for undici's 300 s header timeout, times 1 + retries.
    const gateway = await Gateway.start(t.baseUrl, [{ silent: true }, { silent: true }]);
    try {
      const meter = createMeter({ baseUrl: gateway.url, agentId: agent.agentId, accessToken: 'a-token', retries: 1, timeoutMs: 200, maxDelayMs: 20 });
      const started = Date.now();
      const err = await meter.increment('calls').catch((e: unknown) => e);
      const took = Date.now() - started;
      expect(err).toBeInstanceOf(NetworkError);
      const [first, second] = gateway.clientReqIds();
      expect(second).toBe(first);
      expect(err).toMatchObject({ status: 0, code: 'NETWORK_ERROR', clientReqId: first });
      expect((err as NetworkError).cause).toMatchObject({ name: 'TimeoutError' });
      expect(took).toBeGreaterThanOrEqual(400);
      expect(took).toBeLessThan(5_000);
    } finally {
      await gateway.close();
    }
  });

  it('an answer that starts and stops half way through its body is bounded too', async () => {
    const gateway = await Gateway.start(t.baseUrl, [{ stall: true }]);
    try {
      const meter = createMeter({ baseUrl: gateway.url, agentId: agent.agentId, accessToken: 'a-token', retries: 0, timeoutMs: 200 });
      await expect(meter.usage('calls')).rejects.toBeInstanceOf(NetworkError);
    } finally {
      await gateway.close();
    }
  });

  it('an attempt the service counted but whose answer came too late is sent again with its clientReqId: counted once', async () => {
    const { sub, token } = await subscribedUser();
    // the second attempt reaches the service directly, within a bound a loaded machine keeps; the first answers later
    const gateway = await Gateway.start(t.baseUrl, [{ forward: true, delayMs: 5_000 }]);
    try {
      const meter = createMeter({ baseUrl: gateway.url, agentId: agent.agentId, accessToken: token, timeoutMs: 2_000, maxDelayMs: 20 });
      const result = await meter.increment('calls', { amount: 2 });
      expect(gateway.clientReqIds()).toEqual([result.clientReqId, result.clientReqId]);
      expect([result.replayed, result.data.used]).toEqual([true, 2]); // the stored result of the first attempt
      expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 2, sum: 2 }]);
    } finally {
      await gateway.close();
    }
  });
});

describe('what is retried', () => {
  it("a gateway's 502 and 504 after the service counted are retried with the same clientReqId: counted once", async () => {
    // a crashed isolate behind Supabase's gateway: the call may have been done; only 503 was retried
    const { sub, token } = await subscribedUser();
    const gateway = await Gateway.start(t.baseUrl, [
      { forward: true, status: 502 },
      { forward: true, status: 504 },
    ]);
    try {
      const meter = createMeter({ baseUrl: gateway.url, agentId: agent.agentId, accessToken: token, maxDelayMs: 20 });
      const result = await meter.increment('calls', { amount: 3 });
      expect(gateway.clientReqIds()).toEqual([result.clientReqId, result.clientReqId, result.clientReqId]);
      expect([result.replayed, result.data.used]).toEqual([true, 3]);
      expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 3, sum: 3 }]);
    } finally {
      await gateway.close();
    }
  });

  it('a 4xx is never retried, nor a 500; a 502 that outlasts the retries is thrown with its status', async () => {
    const { token } = await subscribedUser();
    const gateway = await Gateway.start(t.baseUrl);
    try {
      const meter = createMeter({ baseUrl: gateway.url, agentId: agent.agentId, accessToken: token, retries: 2, maxDelayMs: 20 });
      await expect(meter.increment('no-such-metric')).rejects.toBeInstanceOf(NotFoundError);
      expect(gateway.arrivals).toHaveLength(1);

      gateway.arrivals.length = 0;
      gateway.steps.push({ status: 500, body: 'Internal Server Error' });
      await expect(meter.increment('calls')).rejects.toMatchObject({ status: 500 });
      expect(gateway.arrivals).toHaveLength(1);

      gateway.arrivals.length = 0;
      gateway.steps.push({ status: 502 }, { status: 502 }, { status: 502 });
      const err = await meter.increment('calls').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ApiError);
      expect(err).toMatchObject({ status: 502, code: 'HTTP_502', clientReqId: gateway.clientReqIds()[0] });
      expect(new Set(gateway.clientReqIds()).size).toBe(1);
      expect(gateway.arrivals).toHaveLength(3);
    } finally {
      await gateway.close();
    }
  });
});

describe('Retry-After', () => {
  it('a 503 is sent again after its Retry-After, and then counted', async () => {
    const { sub, token } = await subscribedUser();
    const gateway = await Gateway.start(t.baseUrl, [unavailable('1')]);
    try {
      const meter = createMeter({ baseUrl: gateway.url, agentId: agent.agentId, accessToken: token });
      const result = await meter.increment('calls');
      const [first, second] = gateway.arrivals;
      expect(second!.at - first!.at).toBeGreaterThanOrEqual(1_000);
      expect([result.replayed, result.data.used]).toEqual([false, 1]);
      expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 1, sum: 1 }]);
    } finally {
      await gateway.close();
    }
  });

  it('a 503 that outlasts the retries carries its Retry-After (retryAfterSeconds), and a long one is waited at most maxDelayMs', async () => {
    // a plain ApiError with neither the header nor the seconds; a server asking for an hour cannot park the caller
    const gateway = await Gateway.start(t.baseUrl, [unavailable('3600'), unavailable('3600'), unavailable('3600')]);
    try {
      const meter = createMeter({ baseUrl: gateway.url, agentId: agent.agentId, accessToken: 'a-token', retries: 2, maxDelayMs: 100 });
      const started = Date.now();
      const err = (await meter.increment('calls').catch((e: unknown) => e)) as ApiError;
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(err).toBeInstanceOf(ApiError);
      expect([err.status, err.code, err.details.reason]).toEqual([503, 'UNAVAILABLE', 'counter_locked']);
      expect(err.clientReqId).toBe(gateway.clientReqIds()[0]);
      expect([err.retryAfterSeconds, err.retryAfter]).toEqual([3600, 3600]);
      expect(gateway.arrivals).toHaveLength(3);
    } finally {
      await gateway.close();
    }
  });

  it('a Retry-After given as an HTTP date is read as the seconds until it', async () => {
    const at = new Date(Date.now() + 30_000).toUTCString();
    const gateway = await Gateway.start(t.baseUrl, [{ status: 502, headers: { 'retry-after': at } }]);
    try {
      const meter = createMeter({ baseUrl: gateway.url, agentId: agent.agentId, accessToken: 'a-token', retries: 0 });
      const err = (await meter.increment('calls').catch((e: unknown) => e)) as ApiError;
      expect(err.status).toBe(502);
      expect(err.retryAfterSeconds).toBeGreaterThanOrEqual(28);
      expect(err.retryAfterSeconds).toBeLessThanOrEqual(31);
    } finally {
      await gateway.close();
    }
  });
});

describe('a 2xx that is not the service\'s answer', () => {
  // Found by review 20: a gateway's `200 {}` resolved as counted (quota "unlimited") with nothing counted, and a 204
  // threw a bare TypeError without the clientReqId. Either is a network error now, retried with the same clientReqId.
  it('a gateway\'s 200 {} and 204 are sent again with the same clientReqId, and the call is counted once', async () => {
    const { sub, token } = await subscribedUser();
    const gateway = await Gateway.start(t.baseUrl, [
      { status: 200, headers: { 'content-type': 'application/json' }, body: '{}' },
      { status: 204 },
    ]);
    try {
      const meter = createMeter({ baseUrl: gateway.url, agentId: agent.agentId, accessToken: token, maxDelayMs: 20 });
      const result = await meter.increment('calls');
      const ids = gateway.clientReqIds();
      expect(ids).toEqual([result.clientReqId, result.clientReqId, result.clientReqId]);
      expect([result.replayed, result.data.used, result.quota.limit]).toEqual([false, 1, 50]);
      expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 1, sum: 1 }]);
    } finally {
      await gateway.close();
    }
  });

  it('when it is all the meter gets, the call ends in a NetworkError carrying the clientReqId, nothing counted', async () => {
    const { sub, token } = await subscribedUser();
    const gateway = await Gateway.start(t.baseUrl, [{ status: 204 }, { status: 200, headers: { 'content-type': 'application/json' }, body: 'null' }]);
    try {
      const meter = createMeter({ baseUrl: gateway.url, agentId: agent.agentId, accessToken: token, retries: 1, maxDelayMs: 20 });
      const err = await meter.increment('calls', { clientReqId: 'not-an-answer-1' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NetworkError);
      expect(err).toMatchObject({ code: 'NETWORK_ERROR', clientReqId: 'not-an-answer-1' });
      expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([]);
    } finally {
      await gateway.close();
    }
  });
});

describe('the meter is bounded whatever its options', () => {
  it('refuses, when it is made, options it could not bound by (NaN retries retried a network failure forever; found by review 08)', () => {
    const base = { baseUrl: 'http://127.0.0.1:9', agentId: 'a', accessToken: 't' };
    const unset = Number(process.env.NO_SUCH_VARIABLE_FOR_THIS_TEST);
    for (const bad of [
      { retries: unset },
      { retries: -1 },
      { retries: 1.5 },
      { timeoutMs: 0 },
      { timeoutMs: unset },
      { timeoutMs: Infinity },
      { maxDelayMs: -1 },
      { maxDelayMs: unset },
    ]) {
      expect(() => createMeter({ ...base, ...bad }), JSON.stringify(bad)).toThrow(TypeError);
    }
    expect(() => createMeter({ ...base, retries: 0, timeoutMs: 1, maxDelayMs: 0 })).not.toThrow();
  });
});
