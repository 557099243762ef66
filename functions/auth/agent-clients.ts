import { z } from '@hono/zod-openapi';
import { ApiError, notFound } from '../http/errors.ts';
import type { Clock } from '../platform/clock.ts';
import { first, sql, type Db } from '../platform/db.ts';
import { ACCESS_TOKEN_TTL_SECONDS, ADMIN_SCOPE, apiAudience, OAUTH_SCOPES } from './oauth/provider-options.ts';
import type { Config } from '../platform/config.ts';
import { sha256Base64Url } from './oauth/token-records.ts';

/**
 * The OAuth client of an agent: every agent backend signs its users in through our OAuth 2.1 / OIDC server
 * with one confidential client (client_secret_basic, PKCE S256 required, RP-initiated logout enabled).
 *
 * The client row is written straight into the library's "oauthClient" table, inside the caller's transaction,
 * so an agent and its client are created together or not at all. The secret is stored the way the library
 * verifies it (SHA-256, base64url) and returned exactly once.
 *
 * Redirect URIs: https on any host, or http on a loopback IP literal (127.0.0.1, [::1]) for local development.
 * `http://localhost` is refused on purpose: the library refuses it too, and RFC 8252 §8.3 recommends the IP
 * literal (a name can resolve elsewhere). No fragment, no user:password. They are matched character for
 * character at authorize time (protocol-gaps.ts turns off the library's loopback port leniency).
 */

export const MAX_REDIRECT_URIS = 20;
const MAX_URI_LENGTH = 2048;

/** Why a redirect URI is not acceptable, or undefined when it is. */
export function redirectUriProblem(value: string): string | undefined {
  if (value.length > MAX_URI_LENGTH) return `must be at most ${MAX_URI_LENGTH} characters`;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'must be an absolute URL';
  }
  if (value.includes('#')) return 'must not contain a fragment';
  // The code goes to the URL as parsed (control characters dropped, `\\` read as `/`, spaces escaped, the host
  // lower-cased): one stored in another spelling was "matched exactly" as typed while codes went elsewhere, or could
  // never match at all (review 23). So only the parsed spelling is stored.
  if (url.href !== value) return `must be written as the URL it parses to: ${url.href}`;
  if (url.username || url.password) return 'must not contain user credentials';
  if (url.protocol === 'https:') return undefined;
  if (url.protocol === 'http:') {
    if (url.hostname === '127.0.0.1' || url.hostname === '[::1]') return undefined;
    if (url.hostname === 'localhost') return 'http://localhost is not accepted: use http://127.0.0.1 (or https)';
    return 'http is only accepted on a loopback address (127.0.0.1 or [::1]); use https';
  }
  return 'must use https (or http on 127.0.0.1 / [::1])';
}

const redirectUri = z
  .string()
  .superRefine((value, ctx) => {
    const problem = redirectUriProblem(value);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  })
  .openapi({ example: 'https://agent.example.com/oauth/callback' });

/** For request schemas (createAgent, updateAgentClient): at least one redirect URI. */
export const redirectUrisSchema = z
  .array(redirectUri)
  .min(1, 'at least one redirect URI is required')
  .max(MAX_REDIRECT_URIS)
  .openapi({ description: 'OAuth redirect URIs: https, or http on 127.0.0.1 / [::1]; matched exactly' });

export const postLogoutRedirectUrisSchema = z
  .array(redirectUri)
  .max(MAX_REDIRECT_URIS)
  .openapi({ description: 'Where RP-initiated logout may send the browser back; matched exactly' });

export interface AgentClientInput {
  agentId: string;
  /** Shown on the consent page. */
  name: string;
  redirectUris: string[];
  postLogoutRedirectUris?: string[] | undefined;
}

export interface AgentClientCredentials {
  clientId: string;
  /** Shown once: only its hash is stored. */
  clientSecret: string;
}

/**
 * The library's client row, written the way @better-auth/oauth-provider writes one (hashed secret, confidential web
 * client, authorization code + refresh token, PKCE required), for the two kinds of client we create ourselves.
 */
async function insertOAuthClient(
  db: Db,
  client: {
    clientId: string;
    clientSecret: string;
    now: Date;
    name: string;
    scopes: readonly string[];
    redirectUris: string[];
    postLogoutRedirectUris: string[];
    metadata: Record<string, unknown>;
  },
): Promise<void> {
  await sql`
    insert into "oauthClient" (
      "id", "clientId", "clientSecret", "disabled", "skipConsent", "enableEndSession", "scopes",
      "clientCredentialsScopes", "createdAt", "updatedAt", "name", "redirectUris", "postLogoutRedirectUris",
      "tokenEndpointAuthMethod", "applicationType", "grantTypes", "responseTypes", "requirePKCE",
      "dpopBoundAccessTokens", "metadata")
    values (
      ${crypto.randomUUID()}, ${client.clientId}, ${await hashClientSecret(client.clientSecret)}, false, false, true,
      ${JSON.stringify(client.scopes)}::text::jsonb, '[]'::jsonb, ${client.now}, ${client.now}, ${client.name.slice(0, 200)},
      ${JSON.stringify(client.redirectUris)}::text::jsonb, ${JSON.stringify(client.postLogoutRedirectUris)}::text::jsonb,
      'client_secret_basic', 'web', '["authorization_code","refresh_token"]'::jsonb, '["code"]'::jsonb, true,
      false, ${JSON.stringify(client.metadata)}::text::jsonb)`.execute(db);
}

export interface AgentClient {
  clientId: string;
  redirectUris: string[];
  postLogoutRedirectUris: string[];
  createdAt: string;
}

/**
 * Creates the agent's OAuth client in the caller's transaction `db`. Throws 400 VALIDATION_ERROR for bad URIs
 * (field paths `redirectUris.N` / `postLogoutRedirectUris.N`), 409 CONFLICT when the agent already has one.
 */
export async function provisionAgentClient(
  deps: { clock: Clock },
  db: Db,
  input: AgentClientInput,
): Promise<AgentClientCredentials> {
  const redirectUris = checkUris('redirectUris', input.redirectUris, true);
  const postLogoutRedirectUris = checkUris('postLogoutRedirectUris', input.postLogoutRedirectUris ?? [], false);
  const now = deps.clock.now();
  const clientId = randomToken(24);
  const clientSecret = randomToken(32);
  const existing = await first(db, sql`select 1 from public.agent_oauth_clients where agent_id = ${input.agentId}`);
  if (existing) throw new ApiError('CONFLICT', 'This agent already has an OAuth client', { agentId: input.agentId });
  await insertOAuthClient(db, {
    clientId,
    clientSecret,
    now,
    name: input.name,
    scopes: OAUTH_SCOPES,
    redirectUris,
    postLogoutRedirectUris,
    metadata: { agentId: input.agentId },
  });
  await sql`
    insert into public.agent_oauth_clients (agent_id, client_id, created_at, updated_at)
    values (${input.agentId}, ${clientId}, ${now}, ${now})`.execute(db);
  return { clientId, clientSecret };
}

/**
 * The marketplace's own first-party client, for admin automation (scripts, back offices): the one client that belongs
 * to no agent and the only one registered with the `admin` scope, which only a platform_admin can grant
 * (contract.md, Trust boundaries). Its tokens' audience is the API itself. Each call makes a new client and returns
 * its secret once (`npm run admin-client`); there may be several (one per automation), each revocable by deleting it.
 */
export async function provisionFirstPartyClient(
  deps: { clock: Clock; config: Config },
  db: Db,
  input: { name: string; redirectUris: string[] },
): Promise<AgentClientCredentials> {
  const redirectUris = checkUris('redirectUris', input.redirectUris, true);
  const now = deps.clock.now();
  const clientId = randomToken(24);
  const clientSecret = randomToken(32);
  await insertOAuthClient(db, {
    clientId,
    clientSecret,
    now,
    name: input.name,
    scopes: [...OAUTH_SCOPES, ADMIN_SCOPE],
    redirectUris,
    postLogoutRedirectUris: [],
    metadata: { firstParty: true },
  });
  await sql`insert into public.first_party_clients (client_id, created_at) values (${clientId}, ${now})`.execute(db);
  // Linked to the API's own resource (the library seeds the same row from provider-options.ts at start), so its
  // tokens carry `aud` = the API.
  await sql`
    insert into "oauthResource" (id, identifier, name, "accessTokenTtl", disabled, "createdAt", "updatedAt")
    values (${crypto.randomUUID()}, ${apiAudience(deps.config)}, 'Agent Marketplace API', ${ACCESS_TOKEN_TTL_SECONDS}, false, ${now}, ${now})
    on conflict (identifier) do nothing`.execute(db);
  await sql`
    insert into "oauthClientResource" (id, "clientId", "resourceId", "createdAt")
    values (${crypto.randomUUID()}, ${clientId}, ${apiAudience(deps.config)}, ${now})`.execute(db);
  return { clientId, clientSecret };
}

/**
 * The agent's client carries the agent's name (`client_name`: GET /api/auth/oauth2/public-client, which a front end's
 * consent page shows): renamed with the agent, in the caller's transaction. It kept the name the agent was created
 * with, so a consent screen asked on behalf of a name an admin had removed (review 82).
 */
export async function renameAgentClient(db: Db, agentId: string, name: string, now: Date): Promise<void> {
  await sql`update "oauthClient" c set name = ${name}, "updatedAt" = ${now}
              from public.agent_oauth_clients a
             where a.agent_id = ${agentId} and c."clientId" = a.client_id and c.name is distinct from ${name}`.execute(db);
}

/** The agent's client as administrators see it: never the secret. 404 when the agent has none. */
export async function getAgentClient(db: Db, agentId: string): Promise<AgentClient> {
  const row = await first<{ clientId: string; redirectUris: unknown; postLogoutRedirectUris: unknown; createdAt: Date }>(
    db,
    sql`select c."clientId" as "clientId", c."redirectUris" as "redirectUris",
               c."postLogoutRedirectUris" as "postLogoutRedirectUris", a.created_at as "createdAt"
          from public.agent_oauth_clients a
          join "oauthClient" c on c."clientId" = a.client_id
         where a.agent_id = ${agentId}`,
  );
  if (!row) throw notFound('OAuth client of this agent', { agentId });
  return {
    clientId: row.clientId,
    redirectUris: jsonArray(row.redirectUris),
    postLogoutRedirectUris: jsonArray(row.postLogoutRedirectUris),
    createdAt: new Date(row.createdAt).toISOString(),
  };
}

/** Replaces the URIs that are given (each list as a whole). */
export async function updateAgentClient(
  deps: { clock: Clock },
  db: Db,
  agentId: string,
  patch: { redirectUris?: string[] | undefined; postLogoutRedirectUris?: string[] | undefined },
): Promise<AgentClient> {
  const redirectUris = patch.redirectUris === undefined ? null : checkUris('redirectUris', patch.redirectUris, true);
  const postLogout =
    patch.postLogoutRedirectUris === undefined ? null : checkUris('postLogoutRedirectUris', patch.postLogoutRedirectUris, false);
  const updated = await first(
    db,
    sql`update "oauthClient" c
           set "redirectUris" = coalesce(${redirectUris === null ? null : JSON.stringify(redirectUris)}::text::jsonb, c."redirectUris"),
               "postLogoutRedirectUris" = coalesce(${postLogout === null ? null : JSON.stringify(postLogout)}::text::jsonb, c."postLogoutRedirectUris"),
               "updatedAt" = ${deps.clock.now()}
          from public.agent_oauth_clients a
         where a.agent_id = ${agentId} and c."clientId" = a.client_id
     returning c."clientId"`,
  );
  if (!updated) throw notFound('OAuth client of this agent', { agentId });
  return getAgentClient(db, agentId);
}

/**
 * A new secret for the agent's client, returned once; the old one stops working immediately. Tokens already
 * issued stay valid (rotation is about the client's credential, not the users' grants).
 */
export async function rotateAgentClientSecret(deps: { clock: Clock }, db: Db, agentId: string): Promise<AgentClientCredentials> {
  const clientSecret = randomToken(32);
  const row = await first<{ clientId: string }>(
    db,
    sql`update "oauthClient" c
           set "clientSecret" = ${await hashClientSecret(clientSecret)}, "updatedAt" = ${deps.clock.now()}
          from public.agent_oauth_clients a
         where a.agent_id = ${agentId} and c."clientId" = a.client_id
     returning c."clientId" as "clientId"`,
  );
  if (!row) throw notFound('OAuth client of this agent', { agentId });
  return { clientId: row.clientId, clientSecret };
}

function checkUris(field: string, uris: string[], required: boolean): string[] {
  const issues: Array<{ path: string; message: string }> = [];
  if (!Array.isArray(uris)) issues.push({ path: field, message: 'must be a list of URLs' });
  else {
    if (required && uris.length === 0) issues.push({ path: field, message: 'at least one redirect URI is required' });
    if (uris.length > MAX_REDIRECT_URIS) issues.push({ path: field, message: `at most ${MAX_REDIRECT_URIS} URIs` });
    uris.forEach((uri, i) => {
      const problem = typeof uri === 'string' ? redirectUriProblem(uri) : 'must be a string';
      if (problem) issues.push({ path: `${field}.${i}`, message: problem });
    });
  }
  if (issues.length > 0) throw new ApiError('VALIDATION_ERROR', 'The request is not valid', { issues });
  return [...new Set(uris)];
}

function jsonArray(value: unknown): string[] {
  const parsed = typeof value === 'string' ? JSON.parse(value) : value;
  return Array.isArray(parsed) ? parsed.filter((v): v is string => typeof v === 'string') : [];
}

/** `bytes` random bytes as base64url (no padding): 24 -> 32 characters, 32 -> 43. */
function randomToken(bytes: number): string {
  return base64Url(crypto.getRandomValues(new Uint8Array(bytes)));
}

/** The library's stored form of a client secret (storeClientSecret "hashed"): SHA-256, base64url, no padding. */
const hashClientSecret = sha256Base64Url;

function base64Url(bytes: Uint8Array): string {
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}
