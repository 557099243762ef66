import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  apiErrorOf,
  createMarketplaceClient,
  createMeter,
  createOAuth,
  IdempotencyConflictError,
  NetworkError,
  QuotaExceededError,
  SubscriptionRequiredError,
  verifyWebhook,
  WebhookVerificationError,
  type TokenSet,
} from '@agent-marketplace/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { clientOfAgent, landingAfterConsent, type TestOAuthClient } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { ledgerAgreesWithCounters, meteredAgent, subscribe, type MeteredAgent } from '../metering/support.ts';
import { addEndpoint, drain, Receiver } from '../webhooks/support.ts';

/**
 * The SDK (packages/client, imported by its package name as an agent backend would) against the real service:
 * the OAuth flow through createOAuth, metering through createMeter (its retries through a proxy that loses an
 * answer), the typed client, and agent webhooks verified with verifyWebhook.
 */

let t: TestApp;
let user: TestUser;
let agent: MeteredAgent;
let oauthClient: TestOAuthClient;

beforeAll(async () => {
  t = await startTestApp();
  user = await signUp(t);
  agent = await meteredAgent(t.db, [
    { slug: 'calls', kind: 'rolling', quota: 5 },
    { slug: 'seats', kind: 'fixed', quota: 3 },
  ]);
  oauthClient = await clientOfAgent(t, agent.agentId);
});
afterAll(() => t?.close());

const signInFor = () =>
  createOAuth({
    issuer: `${t.baseUrl}/api/auth`,
    clientId: oauthClient.clientId,
    clientSecret: oauthClient.clientSecret,
    redirectUri: oauthClient.redirectUri,
    allowInsecureHttp: true,
  });

/** The user's browser between authorize and the callback: signed in, consents, lands with a code. */
const browser = (url: string, as: TestUser = user): Promise<URL> => landingAfterConsent(t, url, as);

async function signedIn(as: TestUser = user, signIn = signInFor()): Promise<TokenSet> {
  const { url, state, codeVerifier } = await signIn.authorizationUrl();
  expect(new URL(url).searchParams.get('code_challenge_method')).toBe('S256');
  return signIn.exchangeCode(await browser(url, as), { state, codeVerifier });
}

describe('token renewal and errors (found by a review of the SDK)', () => {
  it('two refreshes of one refresh token at once share one request: both get the same tokens and the grant lives', async () => {
    // Each refresh went to the token endpoint: the service took the second presentation for a stolen token and
    // ended the grant, so two requests of one user refreshing together signed the user out of the agent.
    const other = await signUp(t);
    const signIn = signInFor();
    const tokens = await signedIn(other, signIn);
    const [a, b] = await Promise.all([signIn.refresh(tokens.refreshToken!), signIn.refresh(tokens.refreshToken!)]);
    expect(a.refreshToken).toBe(b.refreshToken);
    expect((await t.http.get('/me', { bearer: a.accessToken })).status).toBe(200);
    // a late caller still holding the old refresh token gets the same tokens, not a reuse
    expect((await signIn.refresh(tokens.refreshToken!)).accessToken).toBe(a.accessToken);
    await expect(signIn.refresh(a.refreshToken!)).resolves.toMatchObject({ accessToken: expect.any(String) });
  });

  it('a marketplace that never answers fails a refresh after timeoutMs, and the failed refresh is not kept for later callers', async () => {
    const connections: Array<import('node:net').Socket> = [];
    const silent = createServer(() => {}); // accepts, reads, never answers
    silent.on('connection', (socket) => connections.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const signIn = createOAuth({
        issuer: `http://127.0.0.1:${(silent.address() as AddressInfo).port}/api/auth`,
        clientId: 'c',
        clientSecret: 's',
        redirectUri: 'http://127.0.0.1:9/cb',
        allowInsecureHttp: true,
        timeoutMs: 200,
      });
      // without the bound this waits for good (the test's own timeout ends it)
      await expect(signIn.refresh('a-refresh-token')).rejects.toThrow();
      await expect(signIn.refresh('a-refresh-token')).rejects.toThrow(); // asked again, not the first failure kept
      expect(connections.length).toBeGreaterThanOrEqual(2);
    } finally {
      silent.closeAllConnections();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  it("a token function's error (a refused refresh) is thrown as it is, not retried as a network error", async () => {
    const other = await signUp(t);
    await subscribe(t, other.userId, agent.tierId);
    const signIn = signInFor();
    const tokens = await signedIn(other, signIn);
    await signIn.revoke(tokens.refreshToken!);
    let asked = 0;
    const accessToken = async () => {
      asked += 1;
      return (await signIn.refresh(tokens.refreshToken!)).accessToken;
    };
    const meter = createMeter({ baseUrl: t.baseUrl, agentId: agent.agentId, accessToken, maxDelayMs: 20 });
    await expect(meter.increment('calls')).rejects.toMatchObject({ error: 'invalid_grant' });
    expect(asked).toBe(1); // it was sent 1 + retries times
  });

  it('a 401 asks the token function once more (rejected: the refused token) and sends the same call again: counted once', async () => {
    const other = await signUp(t);
    const sub = await subscribe(t, other.userId, agent.tierId);
    const signIn = signInFor();
    let tokens = await signedIn(other, signIn);
    // the user signs out of the marketplace: access tokens issued under that session stop working
    expect((await t.http.post('/api/auth/sign-out', { cookie: other.cookie, headers: { origin: t.baseUrl } })).status).toBe(200);
    const asks: Array<string | undefined> = [];
    const accessToken = async ({ rejected }: { rejected?: string }) => {
      asks.push(rejected);
      if (rejected === tokens.accessToken) tokens = await signIn.refresh(tokens.refreshToken!);
      return tokens.accessToken;
    };
    const meter = createMeter({ baseUrl: t.baseUrl, agentId: agent.agentId, accessToken, maxDelayMs: 20 });
    const result = await meter.increment('calls');
    expect(result.data).toMatchObject({ used: 1 });
    expect(asks).toEqual([undefined, expect.any(String)]);
    expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 1, sum: 1 }]);
    // a token function that has nothing fresher gives the 401 back after one more ask
    const stuck = createMeter({ baseUrl: t.baseUrl, agentId: agent.agentId, accessToken: () => 'not-a-token', maxDelayMs: 20 });
    await expect(stuck.increment('calls')).rejects.toMatchObject({ status: 401, code: 'UNAUTHORIZED', clientReqId: expect.any(String) });
  });

  it('when every attempt loses its answer, the NetworkError carries the clientReqId the service may have counted', async () => {
    const other = await signUp(t);
    const sub = await subscribe(t, other.userId, agent.tierId);
    const tokens = await signedIn(other);
    const proxy = await LossyProxy.start(t.baseUrl);
    try {
      proxy.dropNext = 2;
      const meter = createMeter({ baseUrl: proxy.url, agentId: agent.agentId, accessToken: tokens.accessToken, retries: 1, maxDelayMs: 20 });
      const err = await meter.increment('calls').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NetworkError);
      expect(err).toMatchObject({ code: 'NETWORK_ERROR', clientReqId: JSON.parse(proxy.bodies[0]!).clientReqId });
      expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 1, sum: 1 }]); // it was counted
      // sent again with that key, it is a replay
      const again = await createMeter({ baseUrl: t.baseUrl, agentId: agent.agentId, accessToken: tokens.accessToken }).increment('calls', {
        clientReqId: (err as NetworkError).clientReqId!,
      });
      expect([again.replayed, again.data.used]).toEqual([true, 1]);
    } finally {
      await proxy.close();
    }
  });
});

describe('createOAuth', () => {
  it('runs the code flow with PKCE, refreshes with rotation, and revokes', async () => {
    const signIn = signInFor();
    const tokens = await signedIn();
    expect(tokens.accessToken).toMatch(/^ey/);
    expect(tokens.refreshToken).toBeTruthy();
    expect(tokens.expiresAt.getTime()).toBeGreaterThan(Date.now());

    const refreshed = await signIn.refresh(tokens.refreshToken!);
    expect(refreshed.refreshToken).not.toBe(tokens.refreshToken);
    expect((await t.http.get('/me', { bearer: refreshed.accessToken })).status).toBe(200);

    await signIn.revoke(refreshed.refreshToken!);
    // oauth4webapi's ResponseBodyError carries the RFC 6749 error code
    await expect(signIn.refresh(refreshed.refreshToken!)).rejects.toMatchObject({ error: 'invalid_grant' });
  });

  it('refuses a callback whose state is not the one it sent (a forged callback)', async () => {
    const signIn = signInFor();
    const { url, codeVerifier } = await signIn.authorizationUrl();
    const landing = await browser(url);
    await expect(signIn.exchangeCode(landing, { state: 'another-state', codeVerifier })).rejects.toThrow(/state/);
  });
});

describe('createMeter', () => {
  it('increments with the quota headers parsed, replays a clientReqId, and throws a typed 429 without retrying it', async () => {
    await subscribe(t, user.userId, agent.tierId);
    const tokens = await signedIn();
    const requests: string[] = [];
    const counting: typeof fetch = (input, init) => {
      requests.push(input instanceof Request ? input.url : String(input));
      return fetch(input, init);
    };
    const meter = createMeter({ baseUrl: t.baseUrl, agentId: agent.agentId, accessToken: tokens.accessToken, fetch: counting });

    const first = await meter.increment('calls', { amount: 2 });
    expect(first.data).toMatchObject({ used: 2, limit: 5, remaining: 3, replayed: false });
    expect(first.quota).toEqual({ limit: 5, remaining: 3 });
    expect(first.replayed).toBe(false);
    const again = await meter.increment('calls', { amount: 2, clientReqId: first.clientReqId });
    expect([again.replayed, again.data.used]).toEqual([true, 2]);

    await meter.increment('calls', { amount: 3 });
    requests.length = 0;
    const denied = await meter.increment('calls').catch((err: unknown) => err);
    expect(denied).toBeInstanceOf(QuotaExceededError);
    const quota = denied as QuotaExceededError;
    expect([quota.status, quota.metric, quota.used, quota.limit, quota.requested]).toEqual([429, 'calls', 5, 5, 1]);
    expect(quota.periodEnd).toBeInstanceOf(Date);
    expect(quota.retryAfterSeconds).toBeGreaterThan(0);
    expect(quota.retryAfter).toBe(quota.retryAfterSeconds);
    expect(quota.replayed).toBe(false);
    expect(requests).toHaveLength(1); // a quota 429 is never retried

    const conflict = await meter.increment('seats', { amount: 1, clientReqId: first.clientReqId }).then(
      () => meter.increment('seats', { amount: 2, clientReqId: first.clientReqId }),
    ).catch((err: unknown) => err);
    expect(conflict).toBeInstanceOf(IdempotencyConflictError);
    expect((conflict as IdempotencyConflictError).original).toMatchObject({ amount: 1 });

    const down = await meter.decrement('seats');
    expect([down.data.used, down.quota.remaining, down.replayed]).toEqual([0, 3, false]);
  });

  it('retries a lost answer (503) with the same clientReqId, so the increment counts once', async () => {
    const other = await signUp(t);
    const sub = await subscribe(t, other.userId, agent.tierId);
    const u = user;
    user = other;
    const tokens = await signedIn().finally(() => (user = u));
    const proxy = await LossyProxy.start(t.baseUrl);
    try {
      proxy.loseNext = 1; // the service counts the first attempt; its answer is replaced by a 503
      const meter = createMeter({ baseUrl: proxy.url, agentId: agent.agentId, accessToken: tokens.accessToken, maxDelayMs: 50 });
      const result = await meter.increment('calls', { amount: 2 });
      expect(proxy.bodies).toHaveLength(2);
      expect(JSON.parse(proxy.bodies[0]!).clientReqId).toBe(JSON.parse(proxy.bodies[1]!).clientReqId);
      expect(result.replayed).toBe(true); // the retry got the stored result of the first attempt
      expect(result.data.used).toBe(2);
      expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 2, sum: 2 }]);
    } finally {
      await proxy.close();
    }
  });

  it('retries when the connection drops after the service counted, with the same clientReqId, so it counts once', async () => {
    const other = await signUp(t);
    const sub = await subscribe(t, other.userId, agent.tierId);
    const u = user;
    user = other;
    const tokens = await signedIn().finally(() => (user = u));
    const proxy = await LossyProxy.start(t.baseUrl);
    try {
      proxy.dropNext = 1; // the service counts the first attempt; the connection is cut before its answer
      const meter = createMeter({ baseUrl: proxy.url, agentId: agent.agentId, accessToken: tokens.accessToken, maxDelayMs: 50 });
      const result = await meter.increment('calls', { amount: 3 });
      expect(proxy.bodies).toHaveLength(2);
      expect(JSON.parse(proxy.bodies[0]!).clientReqId).toBe(JSON.parse(proxy.bodies[1]!).clientReqId);
      expect([result.replayed, result.data.used]).toEqual([true, 3]);
      expect(await ledgerAgreesWithCounters(t.db, sub.id)).toEqual([{ used: 3, sum: 3 }]);
    } finally {
      await proxy.close();
    }
  });

  it('holds, commits what was used, and releases; a user without a subscription gets SubscriptionRequiredError', async () => {
    const buyer = await signUp(t);
    await subscribe(t, buyer.userId, agent.tierId);
    const u = user;
    user = buyer;
    const tokens = await signedIn().finally(() => (user = u));
    const meter = createMeter({ baseUrl: t.baseUrl, agentId: agent.agentId, accessToken: tokens.accessToken });
    const hold = await meter.reserve('calls', { amount: 4, ttlSeconds: 60 });
    expect(hold.data).toMatchObject({ status: 'held', amount: 4 });
    expect(hold.quota.remaining).toBe(1);
    const committed = await meter.commit(hold.data.id, 1);
    expect(committed.data).toMatchObject({ status: 'committed', committedAmount: 1 });
    expect(committed.quota.remaining).toBe(4);
    const second = await meter.reserve('calls', { amount: 2 });
    expect((await meter.release(second.data.id)).data.status).toBe('released');
    expect(await meter.usage('calls')).toMatchObject({ used: 1, reserved: 0, remaining: 4 });

    const stranger = await signUp(t);
    user = stranger;
    const strangerTokens = await signedIn().finally(() => (user = u));
    const refused = await createMeter({ baseUrl: t.baseUrl, agentId: agent.agentId, accessToken: strangerTokens.accessToken })
      .increment('calls')
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(SubscriptionRequiredError);
  });
});

describe('createMarketplaceClient', () => {
  it('calls any operation, typed, with the bearer token', async () => {
    const tokens = await signedIn();
    const client = createMarketplaceClient({ baseUrl: t.baseUrl, accessToken: tokens.accessToken });
    const me = await client.GET('/me');
    expect(me.response.status).toBe(200);
    expect(me.data?.data.email).toBe(user.email);
    const agentRead = await client.GET('/agents/{agentId}', { params: { path: { agentId: agent.agentId } } });
    expect(agentRead.data?.data.id).toBe(agent.agentId);
  });

  it("sends no user bearer to the token, introspection and revocation endpoints, where the client's own credentials are its authentication", async () => {
    // Found by review 86: the bearer there was a second client authentication, refused 400, and the user's token
    // handed to the token endpoint.
    const tokens = await signedIn();
    let asked = 0;
    const client = createMarketplaceClient({
      baseUrl: t.baseUrl,
      accessToken: () => {
        asked += 1;
        return tokens.accessToken;
      },
    });
    expect((await client.GET('/me')).response.status).toBe(200); // every other call carries the bearer
    expect(asked).toBe(1);
    const form = { 'content-type': 'application/x-www-form-urlencoded' };
    const credentials = { client_id: oauthClient.clientId, client_secret: oauthClient.clientSecret };
    const introspected = await client.POST('/api/auth/oauth2/introspect', { headers: form, body: { token: tokens.accessToken, ...credentials } as never });
    expect([introspected.response.status, introspected.error ?? null]).toEqual([200, null]);
    expect(introspected.data).toMatchObject({ active: true });
    const refreshed = await client.POST('/api/auth/oauth2/token', {
      headers: form,
      body: { grant_type: 'refresh_token', refresh_token: tokens.refreshToken!, ...credentials },
    });
    expect([refreshed.response.status, refreshed.error ?? null]).toEqual([200, null]);
    const revoked = await client.POST('/api/auth/oauth2/revoke', {
      headers: form,
      body: { token: (refreshed.data as { refresh_token: string }).refresh_token, token_type_hint: 'refresh_token', ...credentials } as never,
    });
    expect([revoked.response.status, revoked.error ?? null]).toEqual([200, null]);
    expect(asked).toBe(1); // the token function is not asked for them either
  });

  it("apiErrorOf keeps the code of every answer shape docs/errors.md lists: the OAuth endpoints' and the auth library's (review 114)", async () => {
    const client = createMarketplaceClient({ baseUrl: t.baseUrl });
    const form = { 'content-type': 'application/x-www-form-urlencoded' };
    const refresh = (client_secret: string) =>
      client.POST('/api/auth/oauth2/token', {
        headers: form,
        body: { grant_type: 'refresh_token', refresh_token: 'not-a-refresh-token', client_id: oauthClient.clientId, client_secret },
      });
    const grant = await refresh(oauthClient.clientSecret);
    const secret = await refresh('not the secret');
    const signIn = await client.POST('/api/auth/sign-in/email', { body: { email: user.email, password: 'not the password' } });
    const codes = [grant, secret, signIn].map(({ response, error }) => {
      const err = apiErrorOf(response, error);
      return [err.status, err.code, err.message === response.statusText];
    });
    expect(codes).toEqual([
      [400, 'invalid_grant', false],
      [401, 'invalid_client', false],
      [401, 'INVALID_EMAIL_OR_PASSWORD', false],
    ]);
  });
});

describe('verifyWebhook', () => {
  it('accepts a delivery the service signed and refuses the same delivery tampered with', async () => {
    const admin = await createAdmin(t);
    const receiver = await Receiver.start();
    try {
      const endpoint = await addEndpoint(t, admin, agent.agentId, receiver, ['subscription.created']);
      const subscriber = await signUp(t);
      await subscribe(t, subscriber.userId, agent.tierId);
      await drain(t);
      await receiver.arrived(1);
      const delivery = receiver.received[0]!;
      const headers = delivery.headers as Record<string, string>;
      const event = verifyWebhook(endpoint.secret, delivery.body, headers);
      expect(event.type).toBe('subscription.created');
      expect(event.data).toMatchObject({ userId: subscriber.userId });
      expect(() => verifyWebhook(endpoint.secret, delivery.body.replace(subscriber.userId, 'someone-else'), headers)).toThrow(WebhookVerificationError);
      expect(() => verifyWebhook(`whsec_${Buffer.from('another secret of 32 bytes......').toString('base64')}`, delivery.body, headers)).toThrow(
        WebhookVerificationError,
      );
    } finally {
      await receiver.close();
    }
  });
});

/** Forwards to the service; `loseNext` answers are replaced by 503, `dropNext` by a cut connection (the request still reached the service). */
class LossyProxy {
  loseNext = 0;
  /** Answers whose connection is cut instead (a network error at the client). */
  dropNext = 0;
  readonly bodies: string[] = [];
  private server: Server;
  readonly url: string;
  private constructor(server: Server, url: string) {
    this.server = server;
    this.url = url;
  }

  static async start(target: string): Promise<LossyProxy> {
    let proxy!: LossyProxy;
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', async () => {
        const body = Buffer.concat(chunks).toString('utf8');
        proxy.bodies.push(body);
        const headers = new Headers();
        for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && k !== 'host' && k !== 'content-length') headers.set(k, v);
        const answer = await fetch(`${target}${req.url}`, { method: req.method, headers, body: req.method === 'GET' ? undefined : body });
        const text = await answer.text();
        if (proxy.dropNext > 0) {
          proxy.dropNext--;
          req.socket.destroy();
          return;
        }
        if (proxy.loseNext > 0) {
          proxy.loseNext--;
          res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '0' }).end('{"status":"error"}');
          return;
        }
        res.writeHead(answer.status, Object.fromEntries(answer.headers)).end(text);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    proxy = new LossyProxy(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    return proxy;
  }

  async close() {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
