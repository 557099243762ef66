import { decodeProtectedHeader, importJWK, jwtVerify, errors as joseErrors, type CryptoKey, type JWK, type JWTPayload } from 'jose';
import { STALE_SESSION_COOKIE, type AuthenticateOptions, type Authenticator, type BearerCaller, type BearerCheck, type Principal } from '../http/context.ts';
import { ApiError } from '../http/errors.ts';
import type { Clock } from '../platform/clock.ts';
import type { Config } from '../platform/config.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { Logger } from '../platform/logger.ts';
import { trustedOrigins, type Auth } from './better-auth.ts';
import { crossSiteRequest, requestOfTheUser } from './fetch-metadata.ts';
import { revocationKeys } from './oauth/token-records.ts';
import { ADMIN_SCOPE } from './oauth/provider-options.ts';
import { libraryBaseUrl } from './public-path.ts';

/**
 * Who is calling, for every route outside /api/auth: the session cookie first, else an
 * `Authorization: Bearer` JWT access token.
 *
 * Bearer tokens are verified in process with jose against our own signing keys, read from the `jwks` table
 * and cached (no HTTP hop to /api/auth/jwks): issuer, audience, expiry (against the injected clock), `typ`
 * `at+jwt`, and the algorithm of the key that `kid` names (so `alg: none` and keys we never issued fail).
 * Then ONE query, public.bearer_caller, reads the user (exists, not banned, role) together with the revocation
 * list (`jti:<jti>`, `grant:<sid>`, `user:<sub>`): a revoked token, a revoked grant and a banned or deleted user's
 * token stop working on the next request rather than at expiry. A hot route can instead take `bearerCheck` and
 * run that same function inside its own statement (the usage increment does: one round trip).
 *
 * Cookie-authenticated requests that change state (anything but GET/HEAD/OPTIONS) must come from a trusted
 * origin: a browser on another site gets 403, which is what makes SameSite=None cookies safe in production. Reads
 * with the cookie must be the user's own doing by their fetch metadata (fetch-metadata.ts; security rule 29), else
 * 403 `reason: cross_site`, on every route that asks who is calling: reads spend allowances and call Stripe too.
 */

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
/** Re-read the key table at most this often when a token names an unknown key (rotation, or a forgery). */
const KEY_RELOAD_MIN_MS = 5_000;
/**
 * How long a known key is trusted before the key table is read again. Deleting a key from `jwks` (a leaked one) stops
 * every token it signed on every running instance within this time; before, an instance trusted a key it had once
 * loaded until it restarted.
 */
export const KEY_RECHECK_MS = 60_000;

export interface AuthenticatorDeps {
  auth: Auth;
  db: Db;
  config: Config;
  clock: Clock;
  logger: Logger;
}

interface SessionRow {
  sessionId: string;
  expiresAt: Date;
  id: string;
  email: string;
  name: string;
  role: string | null;
  /** Banned now (public.banned_at), by the injected clock. */
  banned: boolean;
  createdAt: Date;
}

export function createAuthenticator(deps: AuthenticatorDeps): Authenticator {
  const { auth, db, config, clock } = deps;
  const issuer = libraryBaseUrl(config);
  const origins = new Set(trustedOrigins(config));
  const keys = new SigningKeys(db, clock);
  const verified = new VerifiedTokens(keys);
  /** Whether a browser request with the cookie is the user's own (fetch-metadata.ts); `page`: see AuthenticateOptions. */
  const ofTheUser = (request: Request, page = false) => requestOfTheUser(request, origins, { crossSiteNavigation: page });
  /**
   * The session cookie, on the hot path: the cookie's HMAC is checked in process and ONE query reads the
   * session with its user. Only when the library would extend the session (once per `updateAge`, a day by
   * default) or the cookie asks not to be remembered does the request go through the library's getSession,
   * which does that write; the result is the same either way.
   */
  async function fromCookie(request: Request, options: AuthenticateOptions): Promise<Principal | null | 'no-session'> {
    const ctx = await auth.$context;
    const session = await sessionCookie(request);
    if (!session) return 'no-session';
    // Review 24: a read another site's page makes the user's browser send (`<img src=".../me/checkout/cs_x">` a
    // hundred times) carried the SameSite=None cookie and acted as the user: it spent their daily checkout reads, each
    // a Stripe read, and their own success page was then refused for a day. Such a read is the user's only by its
    // fetch metadata, before anything is looked up. A top-level navigation from another site counts on a page meant
    // to be opened from links (`options.page`) and nowhere else: a page can navigate a popup it opened again and again
    // without a click, so on the API a navigation would cost not one allowance per click but as many as it likes.
    // Writes keep their own check below (a trusted Origin), as before.
    if (SAFE_METHODS.has(request.method) && !ofTheUser(request, options.page)) throw crossSiteRequest();
    const { cookies } = session;
    const token = await verifySignedCookie(session.value, await cookieKey());
    if (!token) return null;
    const row = await first<SessionRow>(
      db,
      sql`select s.id as "sessionId", s."expiresAt", u.id, u.email, u.name, u.role, u."createdAt",
                 public.banned_at(u.banned, u."banExpires", ${clock.now()}) as banned
            from session s join "user" u on u.id = s."userId"
           where s.token = ${token}`,
    );
    // Session times are the library's, stamped with the wall clock (as its own getSession compares them).
    if (!row || new Date(row.expiresAt).getTime() <= Date.now()) return null;
    if (row.banned) return null;
    const { expiresIn, updateAge } = ctx.sessionConfig;
    const dueForRefresh = new Date(row.expiresAt).getTime() - expiresIn * 1000 + updateAge * 1000 <= Date.now();
    if (dueForRefresh && !cookies.has(ctx.authCookies.dontRememberToken.name)) {
      // Let the library extend the session (its own rules); it answers null if it disagrees.
      const refreshed = await auth.api.getSession({ headers: request.headers, query: { disableCookieCache: true } });
      if (!refreshed) return null;
    }
    if (!SAFE_METHODS.has(request.method)) requireTrustedOrigin(request, origins);
    return {
      userId: row.id,
      email: row.email,
      name: row.name,
      role: row.role === 'platform_admin' ? 'platform_admin' : 'user',
      via: 'cookie',
      sessionId: row.sessionId,
      clientId: undefined,
      agentId: undefined,
      createdAt: new Date(row.createdAt),
    };
  }

  let hmacKey: Promise<CryptoKey> | undefined;
  const cookieKey = () =>
    (hmacKey ??= crypto.subtle.importKey('raw', new TextEncoder().encode(config.authSecret), { name: 'HMAC', hash: 'SHA-256' }, false, [
      'verify',
    ]) as Promise<CryptoKey>);

  /** Verifies the JWT in process; what only the database can say is left in the returned check. */
  async function verifyBearer(token: string): Promise<BearerCheck> {
    const claims = await verified.get(token, clock.now(), () => verifyAccessToken(token, keys, { issuer, now: clock.now() }));
    const sub = claims.sub!;
    const sessionId = typeof claims.sid === 'string' ? claims.sid : undefined;
    const tokenKeys = revocationKeys(sub, typeof claims.jti === 'string' ? claims.jti : undefined, sessionId);
    const clientId = typeof claims.client_id === 'string' ? claims.client_id : typeof claims.azp === 'string' ? claims.azp : undefined;
    if (!clientId) throw invalidToken('The access token names no client');
    // A token bound to a key (RFC 9449 `cnf`) is not a Bearer token: none is issued here (oauth/no-dpop.ts), and the
    // API checks no proof, so one presented as Bearer would work for anyone holding a copy (review 38).
    if (claims.cnf !== undefined) throw invalidToken('The access token is bound to a key (DPoP); this service takes Bearer tokens only');
    const agentId = tokenAgent(claims.aud, config.publicBaseUrl);
    const scopes = typeof claims.scope === 'string' ? claims.scope.split(' ') : [];
    return {
      userId: sub,
      tokenKeys,
      issuedAt: new Date((claims.iat ?? 0) * 1000),
      clientId,
      agentId,
      principal(caller) {
        if (caller.status !== 'ok') throw invalidToken(bearerRefusals[caller.status as keyof typeof bearerRefusals] ?? 'The access token is invalid');
        // A token is an admin credential only when it is the first-party client's (no agent; bearer_caller checked
        // the client), carries the admin scope, and its user is a platform admin now. An agent's token never is,
        // whoever signed in to the agent (contract.md, Trust boundaries).
        const admin = agentId === null && scopes.includes(ADMIN_SCOPE) && caller.role === 'platform_admin';
        return {
          userId: sub,
          email: caller.email!,
          name: caller.name!,
          role: admin ? 'platform_admin' : 'user',
          via: 'bearer',
          sessionId,
          clientId,
          agentId: agentId ?? undefined,
          scopes,
          createdAt: new Date(caller.createdAt!),
        };
      },
    };
  }

  async function fromBearer(token: string): Promise<Principal> {
    const check = await verifyBearer(token);
    const caller = await first<BearerCaller>(
      db,
      sql`select status, email, name, role, created_at as "createdAt"
            from public.bearer_caller(p_user_id => ${check.userId}, p_token_keys => ${check.tokenKeys}::text[],
                                      p_issued_at => ${check.issuedAt}, p_now => ${clock.now()},
                                      p_client_id => ${check.clientId}, p_agent_id => ${check.agentId})`,
    );
    return check.principal(caller!);
  }

  /**
   * The session cookie the request carries (by its exact name), with the request's other cookies; undefined when it
   * carries none. The one rule for which credential a request uses: one that carries the session cookie is judged by
   * that cookie alone, in authenticate() (the routes) and in bearerOnly() (the agent boundary and the bearer-only
   * writes), which must never disagree (a made-up cookie beside an agent's token once went past the boundary).
   */
  async function sessionCookie(request: Request): Promise<{ value: string | undefined; cookies: Map<string, string> } | undefined> {
    const header = request.headers.get('cookie');
    if (!header) return undefined;
    const cookies = parseCookieHeader(header);
    const name = (await auth.$context).authCookies.sessionToken.name;
    return cookies.has(name) ? { value: cookies.get(name), cookies } : undefined;
  }

  /** The bearer token of a request without a session cookie (sessionCookie says why). */
  async function bearerOnly(request: Request): Promise<string | undefined> {
    const authorization = request.headers.get('authorization');
    if (!authorization) return undefined;
    if (await sessionCookie(request)) return undefined;
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    return match?.[1];
  }

  return {
    requestOfTheUser: (request) => ofTheUser(request),
    async bearerCheck(request) {
      const token = await bearerOnly(request);
      return token ? verifyBearer(token) : undefined;
    },
    async authenticate(request, options = {}) {
      // A session cookie that no longer names a live session (signed out elsewhere, expired, banned) makes the
      // request anonymous: browsers send cookies on their own, so a public page must still answer, while every route
      // that needs a user answers 401 as for any anonymous caller. It never falls back to the request's bearer token
      // (sessionCookie says why).
      const fromSession = await fromCookie(request, options);
      if (fromSession !== 'no-session') {
        // With a bearer token beside it the caller meant to be someone: a 401 that says which credential was read,
        // and not that the token is invalid (it was not looked at; an OAuth client would throw a good token away).
        if (!fromSession && request.headers.has('authorization')) throw staleSessionCookie();
        return fromSession;
      }
      const authorization = request.headers.get('authorization');
      if (authorization) {
        const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
        if (!match) throw invalidToken('The Authorization header must be `Bearer <access token>`');
        // A bearer token is presented on purpose, so a bad one is a 401 even on public routes.
        return fromBearer(match[1]!);
      }
      return null;
    },
  };
}

function requireTrustedOrigin(request: Request, origins: Set<string>) {
  const origin = request.headers.get('origin');
  const referer = request.headers.get('referer');
  let from: string | undefined;
  if (origin && origin !== 'null') from = origin;
  else if (referer) {
    try {
      from = new URL(referer).origin;
    } catch {
      from = 'invalid';
    }
  } else if (origin === 'null' || request.headers.get('sec-fetch-site') === 'cross-site') {
    from = 'null';
  }
  // No Origin, Referer or fetch metadata at all: not a browser (a browser always sends Origin on these
  // methods), so there is no cross-site request to forge.
  if (from !== undefined && !origins.has(from)) {
    throw new ApiError('FORBIDDEN', 'Cookie-authenticated requests that change state must come from a trusted origin', {
      origin: from,
    });
  }
}

const invalidToken = (message: string) => new ApiError('UNAUTHORIZED', message);

const staleSessionCookie = () =>
  new ApiError(
    'UNAUTHORIZED',
    'The session cookie sent with this request names no live session (signed out or expired), and a request that carries the session cookie is judged by it alone: the bearer token beside it was not read. Send the token without the cookie, or sign in again',
    { reason: STALE_SESSION_COOKIE },
  );

/** public.bearer_caller's verdicts other than 'ok'. */
const bearerRefusals = {
  no_user: 'The access token belongs to no user',
  revoked: 'The access token has been revoked',
  banned: 'The account is banned',
  wrong_client: 'The access token was not issued to a client of the agent it names',
};

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The agent a token acts within, from its audience: `{base}/agents/{agentId}` for an agent's client, or null for
 * the first-party client's `{base}`. The userinfo endpoint may ride along in `aud` (the library adds it for
 * `openid`). Any other audience, or two agents, is not a token for this API. The Data API's policies read the audience
 * the same way in SQL (public.data_api_token_reaches, migration 20261127004200, review 22): change both together.
 */
function tokenAgent(aud: unknown, base: string): string | null {
  const values = Array.isArray(aud) ? aud : [aud];
  const prefix = `${base}/agents/`;
  const agents = new Set<string>();
  let api = false;
  for (const value of values) {
    if (typeof value !== 'string') continue;
    if (value === base) api = true;
    else if (value.startsWith(prefix) && UUID.test(value.slice(prefix.length))) agents.add(value.slice(prefix.length).toLowerCase());
  }
  if (agents.size === 1 && !api) return [...agents][0]!;
  if (agents.size === 0 && api) return null;
  throw invalidToken('The access token is not for this API (audience)');
}

function parseCookieHeader(header: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const name = part.slice(0, eq).trim();
    if (!out.has(name)) out.set(name, part.slice(eq + 1).trim());
  }
  return out;
}

/**
 * The library's signed cookie: `encodeURIComponent(token + "." + base64(HMAC-SHA256(secret, token)))`.
 * Returns the token when the signature is right, else undefined.
 */
async function verifySignedCookie(raw: string | undefined, key: CryptoKey): Promise<string | undefined> {
  if (!raw) return undefined;
  let value: string;
  try {
    value = decodeURIComponent(raw);
  } catch {
    return undefined;
  }
  const dot = value.lastIndexOf('.');
  if (dot < 1) return undefined;
  const token = value.slice(0, dot);
  const signature = value.slice(dot + 1);
  if (signature.length !== 44 || !signature.endsWith('=')) return undefined;
  let bytes: Uint8Array<ArrayBuffer>;
  try {
    bytes = Uint8Array.from(atob(signature), (ch) => ch.charCodeAt(0));
  } catch {
    return undefined;
  }
  const ok = await crypto.subtle.verify('HMAC', key, bytes, new TextEncoder().encode(token));
  return ok ? token : undefined;
}

interface VerifyOptions {
  issuer: string;
  now: Date;
}

async function verifyAccessToken(token: string, keys: SigningKeys, options: VerifyOptions): Promise<{ claims: JWTPayload; kid: string }> {
  let header;
  try {
    header = decodeProtectedHeader(token);
  } catch {
    throw invalidToken('The access token is not a JWT');
  }
  // Every header field is the caller's: a `typ` of 1 or {} made toLowerCase throw (a 500 for any request, found by a review).
  if (typeof header.kid !== 'string' || typeof header.alg !== 'string' || header.alg === 'none') {
    throw invalidToken('The access token is not signed by this server');
  }
  const typ = typeof header.typ === 'string' ? header.typ.toLowerCase() : '';
  if (typ !== 'at+jwt' && typ !== 'application/at+jwt') throw invalidToken('The token is not an access token (typ at+jwt)');
  const key = await keys.get(header.kid);
  if (!key || key.alg !== header.alg) throw invalidToken('The access token is not signed by this server');
  try {
    const { payload } = await jwtVerify(token, key.key, {
      issuer: options.issuer,
      algorithms: [key.alg],
      currentDate: options.now,
      // The audience names the agent (or the API itself): checked by tokenAgent, since jose compares exact values.
      requiredClaims: ['sub', 'exp', 'iat', 'aud'],
    });
    return { claims: payload, kid: header.kid };
  } catch (err) {
    if (err instanceof joseErrors.JWTExpired) throw invalidToken('The access token has expired');
    if (err instanceof joseErrors.JOSEError) throw invalidToken('The access token is invalid');
    throw err;
  }
}

/**
 * Tokens whose signature and claims were already verified, so an agent backend that sends the same access
 * token for hours pays the signature check once (EdDSA verification is most of a bearer request's CPU).
 * Only the pure part is remembered: expiry is re-checked against the clock on every use, so is the signing key
 * (still in the key table, as SigningKeys last read it), and the user and revocation query still runs on every
 * request. Bounded: the oldest entries go first.
 */
class VerifiedTokens {
  static readonly MAX = 10_000;
  #entries = new Map<string, { claims: JWTPayload; kid: string }>();
  readonly #keys: SigningKeys;

  constructor(keys: SigningKeys) {
    this.#keys = keys;
  }

  async get(token: string, now: Date, verify: () => Promise<{ claims: JWTPayload; kid: string }>): Promise<JWTPayload> {
    const hit = this.#entries.get(token);
    if (hit) {
      if ((hit.claims.exp ?? 0) * 1000 > now.getTime() && (await this.#keys.get(hit.kid))) return hit.claims;
      this.#entries.delete(token);
    }
    const verified = await verify();
    if (this.#entries.size >= VerifiedTokens.MAX) this.#entries.delete(this.#entries.keys().next().value!);
    this.#entries.set(token, verified);
    return verified.claims;
  }
}

/**
 * Public signing keys from the jwt plugin's `jwks` table, imported once and cached by key id. The table is read again
 * when a token names a key not seen (at most every KEY_RELOAD_MIN_MS) and, for a known key, once it was last read
 * KEY_RECHECK_MS ago; a key gone from the table is forgotten.
 */
class SigningKeys {
  #keys = new Map<string, { key: CryptoKey; alg: string }>();
  #loadedAt = -Infinity;
  #loading: Promise<void> | undefined;

  private readonly db: Db;
  private readonly clock: Clock;
  constructor(db: Db, clock: Clock) {
    this.db = db;
    this.clock = clock;
  }

  async get(kid: string): Promise<{ key: CryptoKey; alg: string } | undefined> {
    const cached = this.#keys.get(kid);
    // By the service's clock (a clock set back counts as due)
    const age = this.clock.now().getTime() - this.#loadedAt;
    if (cached && age >= 0 && age < KEY_RECHECK_MS) return cached;
    if (!cached && age >= 0 && age < KEY_RELOAD_MIN_MS && !this.#loading) return undefined;
    this.#loading ??= this.#load().finally(() => (this.#loading = undefined));
    await this.#loading;
    return this.#keys.get(kid);
  }

  async #load() {
    const found = await rows<{ id: string; publicKey: string; alg: string | null; crv: string | null }>(
      this.db,
      sql`select id, "publicKey", alg, crv from jwks`,
    );
    const keys = new Map<string, { key: CryptoKey; alg: string }>();
    for (const row of found) {
      const known = this.#keys.get(row.id);
      if (known) {
        keys.set(row.id, known);
        continue;
      }
      const jwk = JSON.parse(row.publicKey) as JWK;
      const alg = row.alg ?? jwk.alg ?? 'EdDSA';
      keys.set(row.id, { key: (await importJWK({ ...jwk, alg }, alg)) as CryptoKey, alg });
    }
    this.#keys = keys;
    this.#loadedAt = this.clock.now().getTime();
  }
}
