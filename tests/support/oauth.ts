import { createHash, randomBytes } from 'node:crypto';
import {
  provisionAgentClient,
  provisionFirstPartyClient,
  rotateAgentClientSecret,
  updateAgentClient,
} from '../../functions/auth/agent-clients.ts';
import { first, sql } from '../../functions/platform/db.ts';
import type { TestApp } from './app.ts';
import { insertAgent } from './fixtures.ts';
import type { TestUser } from './users.ts';

/**
 * Real OAuth access tokens for tests and benchmarks: the authorization-code flow with PKCE run over HTTP
 * against the app under test (authorize with the user's session cookie, consent, code exchange), exactly as an
 * agent backend and a browser would do it. No token is minted by hand.
 *
 *   const { accessToken } = await accessTokenFor(t, user);
 *   await t.http.get('/me', { bearer: accessToken });
 *
 * The client is an agent's OAuth client, made once per app (an agent row inserted by SQL plus
 * provisionAgentClient) and reused, unless `client` is passed. The token is bound to the user's session
 * (`sid`): signing that session out ends it (the refresh token still works), as it would in production.
 */

export const TEST_REDIRECT_URI = 'http://127.0.0.1:9/callback';
export const ALL_SCOPES = 'openid profile email offline_access';

export interface TestOAuthClient {
  agentId: string;
  clientId: string;
  clientSecret: string;
  redirectUri: string;
  postLogoutRedirectUri: string;
}

export interface TokenSet {
  accessToken: string;
  /** Present when the scope includes offline_access (the default). */
  refreshToken: string;
  /** Present when the scope includes openid (the default). */
  idToken: string;
  clientId: string;
  clientSecret: string;
  scope: string;
  expiresIn: number;
}

export interface AccessTokenOptions {
  client?: TestOAuthClient;
  /** A token of this agent's own client (tokens act only within their agent): see clientOfAgent. */
  agentId?: string;
  scope?: string;
}

const defaultClients = new WeakMap<TestApp, Promise<TestOAuthClient>>();

/** A new agent with its OAuth client (credentials as createAgent would return them). */
export async function createOAuthClient(
  t: TestApp,
  options: { redirectUris?: string[]; postLogoutRedirectUris?: string[]; name?: string } = {},
): Promise<TestOAuthClient> {
  const agent = await insertAgent(t.db, options.name ? { name: options.name } : {});
  const redirectUris = options.redirectUris ?? [TEST_REDIRECT_URI];
  const postLogoutRedirectUris = options.postLogoutRedirectUris ?? ['http://127.0.0.1:9/signed-out'];
  const credentials = await t.db
    .transaction()
    .execute((trx) =>
      provisionAgentClient(t.deps, trx, { agentId: agent.id, name: agent.name, redirectUris, postLogoutRedirectUris }),
    );
  return {
    agentId: agent.id,
    ...credentials,
    redirectUri: redirectUris[0]!,
    postLogoutRedirectUri: postLogoutRedirectUris[0] ?? '',
  };
}

const agentClients = new WeakMap<TestApp, Map<string, Promise<TestOAuthClient>>>();

/**
 * The OAuth client of an existing agent, with a secret the test knows: provisioned when the agent has none (agents
 * inserted by fixtures), else its secret is rotated (agents made by createAgent) as an admin would. Once per agent.
 */
export function clientOfAgent(t: TestApp, agentId: string): Promise<TestOAuthClient> {
  let byAgent = agentClients.get(t);
  if (!byAgent) agentClients.set(t, (byAgent = new Map()));
  let client = byAgent.get(agentId);
  if (!client) {
    client = (async () => {
      const redirectUris = [TEST_REDIRECT_URI];
      const credentials = await t.db.transaction().execute(async (trx) => {
        const existing = await first(trx, sql`select 1 from public.agent_oauth_clients where agent_id = ${agentId}`);
        if (existing) {
          await updateAgentClient(t.deps, trx, agentId, { redirectUris, postLogoutRedirectUris: ['http://127.0.0.1:9/signed-out'] });
          return rotateAgentClientSecret(t.deps, trx, agentId);
        }
        return provisionAgentClient(t.deps, trx, {
          agentId,
          name: 'Agent under test',
          redirectUris,
          postLogoutRedirectUris: ['http://127.0.0.1:9/signed-out'],
        });
      });
      return { agentId, ...credentials, redirectUri: TEST_REDIRECT_URI, postLogoutRedirectUri: 'http://127.0.0.1:9/signed-out' };
    })();
    byAgent.set(agentId, client);
    client.catch(() => byAgent!.delete(agentId));
  }
  return client;
}

/**
 * A first-party client of the marketplace (admin automation: the only client that may ask for the `admin` scope).
 */
export async function createFirstPartyClient(t: TestApp): Promise<TestOAuthClient & { agentId: '' }> {
  const credentials = await t.db
    .transaction()
    .execute((trx) => provisionFirstPartyClient(t.deps, trx, { name: 'Back office', redirectUris: [TEST_REDIRECT_URI] }));
  return { agentId: '', ...credentials, redirectUri: TEST_REDIRECT_URI, postLogoutRedirectUri: '' };
}

/** The app's shared test client, created on first use. */
export function defaultOAuthClient(t: TestApp): Promise<TestOAuthClient> {
  let client = defaultClients.get(t);
  if (!client) {
    client = createOAuthClient(t, { name: 'Test Agent' });
    defaultClients.set(t, client);
    client.catch(() => defaultClients.delete(t));
  }
  return client;
}

export function pkcePair(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

export function authorizeUrl(
  client: TestOAuthClient,
  params: { challenge?: string; state?: string; scope?: string; redirectUri?: string; nonce?: string } = {},
): string {
  const query = new URLSearchParams({
    response_type: 'code',
    client_id: client.clientId,
    redirect_uri: params.redirectUri ?? client.redirectUri,
    scope: params.scope ?? ALL_SCOPES,
    state: params.state ?? randomBytes(8).toString('hex'),
  });
  if (params.challenge) {
    query.set('code_challenge', params.challenge);
    query.set('code_challenge_method', 'S256');
  }
  if (params.nonce) query.set('nonce', params.nonce);
  return `/api/auth/oauth2/authorize?${query}`;
}

/** What a browser does between "authorize" and "back at the agent": returns the code and state it lands with. */
export async function authorizeInBrowser(
  t: TestApp,
  user: TestUser,
  client: TestOAuthClient,
  params: { challenge: string; scope?: string; state?: string; nonce?: string },
): Promise<{ code: string; state: string; landing: URL }> {
  const landing = await landingAfterConsent(t, authorizeUrl(client, params), user);
  const code = landing.searchParams.get('code');
  if (!code) throw new Error(`the flow ended at ${landing} without a code`);
  return { code, state: landing.searchParams.get('state') ?? '', landing };
}

/**
 * Where the user's browser lands at the client after an authorize URL (a path or a whole URL): signed in, it consents
 * (or denies, `accept` false) when asked, and lands at the redirect URI with a code or an error.
 */
export async function landingAfterConsent(t: TestApp, url: string, user: TestUser, accept = true): Promise<URL> {
  const target = new URL(url, t.baseUrl);
  const landing = await followAuthorize(t, `${target.pathname}${target.search}`, user.cookie);
  if (landing.pathname !== '/consent') return landing;
  const consent = await t.http.post('/api/auth/oauth2/consent', {
    cookie: user.cookie,
    headers: { origin: t.baseUrl },
    json: { accept, consent_code: landing.searchParams.get('consent_code') },
  });
  if (consent.status !== 200 || typeof consent.body?.url !== 'string') throw new Error(`consent answered ${consent.status} ${consent.text}`);
  return new URL(consent.body.url);
}

/**
 * Where GET authorize sends the browser. Node's fetch always sends `Sec-Fetch-Mode: cors`, so the library
 * answers a script-style 200 `{ redirect: true, url }` rather than a 302; both mean "go there".
 */
export async function followAuthorize(t: TestApp, path: string, cookie?: string): Promise<URL> {
  const res = await t.http.get(path, cookie ? { cookie } : {});
  if (res.status >= 300 && res.status < 400) return new URL(res.headers.get('location')!, t.baseUrl);
  if (res.status === 200 && res.body?.redirect === true && typeof res.body.url === 'string') return new URL(res.body.url, t.baseUrl);
  throw new Error(`authorize answered ${res.status} ${res.text}`);
}

export function basicAuth(client: { clientId: string; clientSecret: string }): string {
  return `Basic ${Buffer.from(`${encodeURIComponent(client.clientId)}:${encodeURIComponent(client.clientSecret)}`).toString('base64')}`;
}

/** POST a form to a token-family endpoint (token, introspect, revoke) with the client's Basic credentials. */
export function postForm(t: TestApp, path: string, client: { clientId: string; clientSecret: string } | null, form: Record<string, string>) {
  return t.http.post(path, {
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      ...(client ? { authorization: basicAuth(client) } : {}),
    },
    body: new URLSearchParams(form).toString(),
  });
}

/** Runs the whole flow for `user` and returns the token response. */
export async function accessTokenFor(t: TestApp, user: TestUser, options: AccessTokenOptions = {}): Promise<TokenSet> {
  const client = options.client ?? (options.agentId ? await clientOfAgent(t, options.agentId) : await defaultOAuthClient(t));
  const { verifier, challenge } = pkcePair();
  const scope = options.scope ?? ALL_SCOPES;
  const { code } = await authorizeInBrowser(t, user, client, { challenge, scope });
  const res = await postForm(t, '/api/auth/oauth2/token', client, {
    grant_type: 'authorization_code',
    code,
    redirect_uri: client.redirectUri,
    code_verifier: verifier,
  });
  if (res.status !== 200) throw new Error(`token endpoint answered ${res.status} ${res.text}`);
  return {
    accessToken: res.body.access_token,
    refreshToken: res.body.refresh_token ?? '',
    idToken: res.body.id_token ?? '',
    clientId: client.clientId,
    clientSecret: client.clientSecret,
    scope: res.body.scope,
    expiresIn: res.body.expires_in,
  };
}
