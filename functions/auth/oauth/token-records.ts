import { first, sql, type Db } from '../../platform/db.ts';
import { ADMIN_SCOPE } from './provider-options.ts';

/**
 * Server-side memory of JWT access tokens, so that they can be revoked before they expire.
 *
 * - Every access token the token endpoint hands out is recorded (jti, client, user, session, expiry).
 * - Revoking one access token, or a whole refresh-token family (client + user, the library's notion of a
 *   family), writes `jti:<jti>` rows into public.revoked_tokens, which the Authenticator checks on every
 *   bearer request; introspection and userinfo check the same rows (revocationState).
 */

export interface AccessTokenClaims {
  jti?: unknown;
  sub?: unknown;
  sid?: unknown;
  iat?: unknown;
  exp?: unknown;
  client_id?: unknown;
  azp?: unknown;
  scope?: unknown;
}

/** The payload of a compact JWS, unverified. Only for tokens we just minted, or to deny (never to allow). */
export function unverifiedClaims(token: string): AccessTokenClaims | undefined {
  const parts = token.split('.');
  if (parts.length !== 3 || !parts[1]) return undefined;
  try {
    const json = atob(parts[1].replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (parts[1].length % 4)) % 4));
    const bytes = Uint8Array.from(json, (c) => c.charCodeAt(0));
    const claims = JSON.parse(new TextDecoder().decode(bytes));
    return claims && typeof claims === 'object' && !Array.isArray(claims) ? (claims as AccessTokenClaims) : undefined;
  } catch {
    return undefined;
  }
}

export const looksLikeJwt = (token: string) => /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/.test(token);

const str = (v: unknown) => (typeof v === 'string' && v.length > 0 ? v : undefined);
const seconds = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/** What the token endpoint keeps of an access token it has just minted. */
export interface IssuedAccessToken {
  jti: string;
  clientId: string;
  userId: string;
  sessionId: string | null;
  expiresAt: Date;
  scopes: string[];
}

/**
 * Reads an access token the token endpoint has just minted, once (its claims are ours: read without a check). The
 * library always sets these claims; a token without them is a bug in the service, not a client's doing.
 */
export function issuedAccessToken(accessToken: string): IssuedAccessToken {
  const claims = unverifiedClaims(accessToken);
  const jti = str(claims?.jti);
  const clientId = str(claims?.client_id) ?? str(claims?.azp);
  const userId = str(claims?.sub);
  const exp = seconds(claims?.exp);
  if (!jti || !clientId || !userId || exp === undefined) throw new Error('the token endpoint minted an access token without jti, sub, client_id or exp');
  return {
    jti,
    clientId,
    userId,
    sessionId: str(claims?.sid) ?? null,
    expiresAt: new Date(exp * 1000),
    scopes: str(claims?.scope)?.split(' ') ?? [],
  };
}

/**
 * Records an access token just issued by the token endpoint, with the (hashed) authorization code its grant
 * started from; old records are purged on the way.
 */
export async function recordIssuedAccessToken(
  db: Db,
  token: IssuedAccessToken,
  authorizationCodeId: string | null,
  now: Date,
): Promise<void> {
  await sql`
    with purge as (
      delete from public.oauth_issued_access_tokens
       where jti in (select jti from public.oauth_issued_access_tokens where expires_at < ${now} order by expires_at limit 100
                     -- rows another token request is purging are left to it: this runs inside the token endpoint's
                     -- transaction, so waiting for them would queue concurrent token requests behind each other
                     for update skip locked)
    )
    insert into public.oauth_issued_access_tokens
      (jti, client_id, user_id, session_id, authorization_code_id, expires_at, created_at)
    values (${token.jti}, ${token.clientId}, ${token.userId}, ${token.sessionId}, ${authorizationCodeId}, ${token.expiresAt}, ${now})
    on conflict (jti) do nothing`.execute(db);
}

/** Revokes one access token until it would have expired anyway. */
export async function revokeAccessToken(db: Db, jti: string, expiresAt: Date): Promise<void> {
  await sql`
    insert into public.revoked_tokens (key, expires_at) values (${`jti:${jti}`}, ${expiresAt})
    on conflict (key) do update set expires_at = greatest(public.revoked_tokens.expires_at, excluded.expires_at),
                                    issued_before = null`.execute(db);
}

/** Revokes a refresh token (by its row) the token endpoint has just obtained, before the client ever sees it. */
export async function revokeIssuedRefreshToken(db: Db, id: string): Promise<void> {
  await sql`update "oauthRefreshToken" set revoked = now() where id = ${id} and revoked is null`.execute(db);
}

/**
 * Whether the grant of a just-minted access token still stands: its client is not disabled (the agent was not
 * deactivated while the library was minting), a token with the admin scope is a platform admin's, and the user's
 * consent to the client still covers every scope the token carries, or the client needs none (skipConsent, which none of our clients is registered with). The library asks for
 * consent when it issues a code, not when the code is exchanged, and a refresh copies the refresh token's scopes
 * without looking at the consent, so a code redeemed, or a refresh token presented, after the user withdrew consent
 * or consented again to fewer scopes (update-consent, or a new authorization the library records in its place) would
 * otherwise still give what they took back (the refresh case found by a review).
 * The client's row is read FOR SHARE: a deactivation (an UPDATE of that row, then a copy of the client's recorded
 * tokens to the revocation list) either commits before this read, or waits for this transaction and then revokes the
 * token it recorded.
 */
// The admin scope only for a platform admin, whichever way the authorization reached the library: the authorize
// wrapper refuses it, but a sign-in carrying the signed query, or /oauth2/continue, goes on to consent without passing
// there (found by a review). A demoted admin's refresh ends here too. The library's adapter stores the consent's
// scopes as a JSON string inside the jsonb, which public.oauth_consent_scopes reads (migration 20261126001900). (Keep comments out of this SQL: pg_stat_activity
// keeps a statement's first 1,024 bytes, and the race tests find this one waiting by its text.)
export async function grantStands(db: Db, token: Pick<IssuedAccessToken, 'clientId' | 'userId' | 'scopes'>): Promise<boolean> {
  const row = await first<{ stands: boolean }>(
    db,
    sql`select not coalesce(c.disabled, false)
               and (coalesce(c."skipConsent", false)
                    or exists (select 1 from "oauthConsent" k
                                where k."clientId" = c."clientId" and k."userId" = ${token.userId}
                                  and public.oauth_consent_scopes(k.scopes) @> ${JSON.stringify(token.scopes)}::text::jsonb))
               and (not ${token.scopes.includes(ADMIN_SCOPE)}::boolean
                    or exists (select 1 from "user" u where u.id = ${token.userId} and u.role = 'platform_admin')) as stands
          from "oauthClient" c where c."clientId" = ${token.clientId}
           for share of c`,
  );
  return row?.stands === true;
}

/**
 * Whether the grant behind a token the library introspected as active still stands (grantStands, read off the answer's
 * `client_id`, `sub` and `scope`). A refresh token outlives a consent the user narrowed (the token endpoint refuses it
 * then, by grantStands; the access tokens are revoked at once, migration 20261126001900), and introspection called it
 * active with the scopes taken back (review 108). An answer without those claims is left to the library.
 */
export async function introspectedGrantStands(db: Db, answer: Record<string, unknown>): Promise<boolean> {
  const { client_id: clientId, sub: userId, scope } = answer;
  if (typeof clientId !== 'string' || typeof userId !== 'string' || typeof scope !== 'string') return true;
  return grantStands(db, { clientId, userId, scopes: scope.split(' ').filter(Boolean) });
}

/**
 * Ends a refresh-token family the library has just refused a second presentation of (a reused refresh token, a
 * replayed code, or two presentations at once): in the order of every end (the user's row first), the family is
 * remembered (migration 20261125001200) and what a rotation racing the library's own deletion wrote meanwhile is
 * deleted; a rotation that writes later is born revoked (20261125001000). Without a code id, every family of the
 * client and user.
 */
export async function endRefreshTokenFamily(db: Db, family: { userId: string; clientId: string; authorizationCodeId: string | null }): Promise<void> {
  await sql`select public.end_refresh_token_families(${family.userId}, ${family.clientId}, ${family.authorizationCodeId})`.execute(db);
}

/**
 * Ends the grant of a refresh token the library took as reused, which deleted the client's refresh tokens for the user
 * (a second presentation on the token endpoint, a rotated token revoked): the family again under the user's row, and
 * every access token the client holds for the user, in one transaction.
 */
export async function endReusedRefreshToken(
  db: Db,
  token: { userId: string; clientId: string; authorizationCodeId: string | null },
  now: Date,
): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await endRefreshTokenFamily(trx, token);
    await revokeAccessTokensOfFamily(trx, token.clientId, token.userId, now);
  });
}

/** Revokes the live access tokens of one grant: everything issued from one authorization code. */
export async function revokeAccessTokensOfGrant(db: Db, authorizationCodeId: string, now: Date): Promise<void> {
  await sql`
    insert into public.revoked_tokens (key, expires_at)
    select 'jti:' || jti, expires_at
      from public.oauth_issued_access_tokens
     where authorization_code_id = ${authorizationCodeId} and expires_at > ${now}
    on conflict (key) do nothing`.execute(db);
}

/** The client and user an authorization code (hashed id) was exchanged for, if it already was. */
export async function redeemedCode(db: Db, authorizationCodeId: string): Promise<{ clientId: string; userId: string } | undefined> {
  // The access tokens' record is pruned once they expire (10 hours); the refresh tokens of the grant (rotated ones
  // included) keep the code's id for their 30 days, so a used code is known as used, and whose, as long as its grant
  // can still be ended (found by a review: after 10 hours another agent's replay reached the library, which revoked it).
  return first(
    db,
    sql`(select client_id as "clientId", user_id as "userId"
           from public.oauth_issued_access_tokens where authorization_code_id = ${authorizationCodeId} limit 1)
        union all
        (select "clientId", "userId" from "oauthRefreshToken" where "authorizationCodeId" = ${authorizationCodeId} limit 1)
        limit 1`,
  );
}

/**
 * Revokes every live access token the client holds for the user: the library's refresh-token "family"
 * (what it wipes when a rotated refresh token is reused).
 */
export async function revokeAccessTokensOfFamily(db: Db, clientId: string, userId: string, now: Date): Promise<void> {
  await sql`
    insert into public.revoked_tokens (key, expires_at)
    select 'jti:' || jti, expires_at
      from public.oauth_issued_access_tokens
     where client_id = ${clientId} and user_id = ${userId} and expires_at > ${now}
    on conflict (key) do nothing`.execute(db);
}

/**
 * Whether a token that verified cryptographically must still be refused: revoked itself (`jti:`), its grant
 * revoked (`grant:<sid>`), every token of its user issued before a ban (`user:<sub>`), or the user is banned or
 * gone. One indexed query, the same rules as the Authenticator applies to bearer requests.
 */
/**
 * The revocation-list keys that would cancel a token: its user, its id, its grant (session). The Data API's policies
 * make the same keys from the token's claims (public.data_api_token_reaches, review 22): change both together.
 */
export function revocationKeys(sub: string, jti: string | undefined, sid: string | undefined): string[] {
  return [`user:${sub}`, ...(jti ? [`jti:${jti}`] : []), ...(sid ? [`grant:${sid}`] : [])];
}

export async function isRevoked(db: Db, claims: AccessTokenClaims, now: Date): Promise<boolean> {
  const sub = str(claims.sub);
  if (!sub) return false;
  const keys = revocationKeys(sub, str(claims.jti), str(claims.sid));
  const iat = new Date((seconds(claims.iat) ?? 0) * 1000);
  // The same rule as every bearer route (public.bearer_caller): the user exists, is not banned, the token is not revoked.
  const row = await first<{ refused: boolean }>(
    db,
    sql`select status <> 'ok' as refused from public.bearer_caller(${sub}, ${keys}::text[], ${iat}, ${now})`,
  );
  return row?.refused === true;
}

/** The refresh token row a presented refresh token names (the library stores SHA-256, base64url). */
export async function findRefreshToken(
  db: Db,
  refreshToken: string,
): Promise<
  | { id: string; clientId: string; userId: string; sessionId: string | null; authorizationCodeId: string | null; revoked: boolean; expiresAt: Date }
  | undefined
> {
  return first(
    db,
    sql`select id, "clientId" as "clientId", "userId" as "userId", "sessionId" as "sessionId",
               "authorizationCodeId" as "authorizationCodeId", "revoked" is not null as revoked, "expiresAt" as "expiresAt"
          from "oauthRefreshToken" where token = ${await sha256Base64Url(refreshToken)}`,
  );
}

/**
 * The user, client and sign-in session an authorization code (hashed id) not yet exchanged was issued to, from the
 * library's record of it.
 */
export async function pendingCode(
  db: Db,
  authorizationCodeId: string,
): Promise<{ userId: string; clientId: string | undefined; sessionId: string | undefined } | undefined> {
  const row = await first<{ value: string }>(db, sql`select value from verification where identifier = ${authorizationCodeId}`);
  try {
    const value = row ? (JSON.parse(row.value) as { userId?: unknown; sessionId?: unknown; query?: { client_id?: unknown } }) : undefined;
    if (typeof value?.userId !== 'string') return undefined;
    return {
      userId: value.userId,
      clientId: typeof value.query?.client_id === 'string' ? value.query.client_id : undefined,
      sessionId: typeof value.sessionId === 'string' ? value.sessionId : undefined,
    };
  } catch {
    return undefined;
  }
}

export async function userExists(db: Db, userId: string): Promise<boolean> {
  return (await first(db, sql`select 1 from "user" where id = ${userId}`)) !== undefined;
}

export async function refreshTokenState(db: Db, id: string): Promise<'live' | 'revoked' | 'gone'> {
  const row = await first<{ revoked: boolean }>(db, sql`select "revoked" is not null as revoked from "oauthRefreshToken" where id = ${id}`);
  return !row ? 'gone' : row.revoked ? 'revoked' : 'live';
}

export async function sha256Base64Url(value: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(value)));
  let binary = '';
  for (const b of digest) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}
