import { parseAccessTokenAuthorization, stripAccessTokenAuthorizationScheme } from '@better-auth/core/oauth2';
import { Hono, type Context } from 'hono';
import type { AppEnv } from '../../platform/app-types.ts';
import { first, sql, type Db } from '../../platform/db.ts';
import type { Authenticator } from '../../http/context.ts';
import { pagesOrigin, type Config } from '../../platform/config.ts';
import { basicCredentials } from '../../http/basic-credentials.ts';
import { ApiError, pgCode } from '../../http/errors.ts';
import { refundToken, takeToken } from '../../platform/rate-limits.ts';
import { decodeConsentCode, encodeConsentCode } from './consent-code.ts';
import { ADMIN_SCOPE, agentAudience, apiAudience } from './provider-options.ts';
import { trustedOrigins } from '../better-auth.ts';
import { requestOfTheUser, speculative } from '../fetch-metadata.ts';
import {
  pendingCode,
  endRefreshTokenFamily,
  endReusedRefreshToken,
  findRefreshToken,
  grantStands,
  introspectedGrantStands,
  isRevoked,
  issuedAccessToken,
  looksLikeJwt,
  recordIssuedAccessToken,
  refreshTokenState,
  revokeAccessToken,
  revokeAccessTokensOfFamily,
  revokeAccessTokensOfGrant,
  revokeIssuedRefreshToken,
  sha256Base64Url,
  redeemedCode,
  unverifiedClaims,
  userExists,
} from './token-records.ts';
import { withoutDpop } from './no-dpop.ts';
import { inLibraryTransaction } from '../library-database.ts';
import { libraryBaseUrl, onThePublicPath } from '../public-path.ts';

/**
 * Thin wrappers in front of the library's OAuth endpoints, each closing one measured gap between
 * @better-auth/oauth-provider and our contract (DESIGN.md "Known gaps"). Everything else under /api/auth goes
 * to the library untouched; these routes must be mounted before the catch-all /api/auth/* handler.
 *
 * | route | gap closed |
 * |---|---|
 * | GET/POST oauth2/authorize | redirect_uri matched exactly (the library lets loopback ports vary), also beside a `request_uri`; the consent redirect carries `consent_code` instead of the library's loose signed query; parameters bounded (the library stores the whole request as the code); a cross-site request that is no top-level navigation is taken as signed out |
 * | POST oauth2/consent | body `{ accept, consent_code }` (JSON or form); 302 for a browser form post, 200 `{ redirect, url }` for fetch |
 * | POST oauth2/token | the client authenticates first, and a code of another client never reaches the library (it consumes and revokes before it compares the client); `grant_type` read trimmed, as the library reads it; PKCE mistakes 400, not 401; `resource` defaults to the API, so access tokens are always JWTs; issued tokens recorded; a reused code or refresh token also revokes the live access tokens of its grant / family; a code or refresh whose scopes the user's consent no longer covers ends its grant; at most REFRESHES_PER_HOUR refreshes and CODES_PER_HOUR code exchanges per client and user |
 * | POST oauth2/revoke | JWT access tokens revoked through the revocation list (the library refuses); revoking a refresh token also revokes its family's access tokens; unknown tokens -> 200; every 200 empty, with no JSON content type |
 * | POST oauth2/introspect, GET/POST oauth2/userinfo | a revoked token, revoked grant or banned user is inactive / 401, as on every other route; a JWT whose signature or key the library's introspection could not map (it answered an empty 500) is inactive (userinfo: our authenticator's check, signature first; no token: 401 with `WWW-Authenticate: Bearer`) |
 * | every form and query we read | each parameter at most once (`resource` may repeat): we read the first of a repeated field, the library the last |
 * | GET /.well-known/oauth-authorization-server/api/auth | RFC 8414 path-suffixed metadata location, outside /api/auth |
 * | the three metadata documents | advertise the client authentication our clients can use (secret basic/post) |
 * | token, introspect, revoke | client_secret_post accepted as well as client_secret_basic (the library binds a client to one method) |
 * | GET/POST oauth2/end-session | the hinted session is ended only from a browser holding a session (the library ended it for a bare server request), and only by the user's own doing (a cross-site image, frame or fetch is taken as having no session) |
 */

/** The Better Auth handler (the library itself), for a request we may have rewritten. */
const library = (c: Context<AppEnv>, request: Request): Promise<Response> =>
  c.var.deps.auth.handler(onThePublicPath(c.var.deps.config, withoutDpop(request)));

const NO_STORE = { 'cache-control': 'no-store', pragma: 'no-cache' };

export function oauthProtocolRoutes() {
  const router = new Hono<AppEnv>();

  router.on(['GET', 'POST'], '/api/auth/oauth2/authorize', async (c) => {
    const { config, database } = c.var.deps;
    const request = c.req.raw;
    const read = await readParams(request);
    if ('refused' in read) {
      const error = new URL(`${libraryBaseUrl(config)}/error`);
      error.searchParams.set('error', 'invalid_request');
      error.searchParams.set('error_description', read.refused);
      return redirectOrJson(request, error.toString());
    }
    const { params, forwarded } = read;
    const clientId = params.get('client_id');
    const redirectUri = params.get('redirect_uri');
    // Checked whatever else the request carries: with `request_uri` (which we do not support) the library answers
    // request_uri_not_supported through its own redirect-URI lookup, which lets loopback ports vary (review 21).
    const checked = clientId && redirectUri !== null;
    const registered = checked ? await registeredRedirectUris(database.db, clientId) : undefined;
    const prompts = promptsOf(params);
    const signedIn = sessionMayAuthorize(request, config, { silent: prompts.includes('none'), clientPages: registered ?? [] });
    if (checked && !registered) {
      // The library's page says "client_id is required" for a client_id it does not know, which sends its developer
      // looking for a missing parameter; the code is the same (invalid_client), the words say what is wrong.
      const error = new URL(`${libraryBaseUrl(config)}/error`);
      error.searchParams.set('error', 'invalid_client');
      error.searchParams.set('error_description', 'client_id is not registered with the marketplace');
      return redirectOrJson(request, error.toString());
    }
    if (checked) {
      // The library would also accept another port on a loopback host (RFC 8252 native apps); our contract
      // says "matched exactly". Same answer as the library gives for an unregistered URI.
      if (registered && !registered.includes(redirectUri)) {
        const error = new URL(`${libraryBaseUrl(config)}/error`);
        error.searchParams.set('error', 'invalid_redirect');
        error.searchParams.set('error_description', 'redirect_uri is not registered for this client (exact match required)');
        return redirectOrJson(request, error.toString());
      }
      // There is no account chooser (a browser holds one session): the library answered `prompt=select_account` with
      // its own error page, and the agent never heard back (review 69). OpenID Connect's error for it goes to the
      // client; prompt=login is how to sign in as another account.
      if (registered && prompts.includes('select_account')) {
        const refused = authorizationError(config, { redirectUri, state: params.get('state') }, 'account_selection_required',
          'This server has no account chooser; send prompt=login to let the user sign in as another account');
        return redirectOrJson(request, refused);
      }
      // Only a platform admin may grant the admin scope (only the first-party client may ask for it: the library
      // checks the client's registered scopes). Signed-out callers go on to sign in and come back here. The
      // redirect_uri is the client's registered one (checked just above), so the error goes back to it.
      if (registered && signedIn && (params.get('scope') ?? '').split(/\s+/).includes(ADMIN_SCOPE)) {
        const session = await c.var.deps.auth.api.getSession({ headers: request.headers }).catch(() => null);
        if (session && (session.user as { role?: string | null }).role !== 'platform_admin') {
          const denied = authorizationError(config, { redirectUri, state: params.get('state') }, 'access_denied', 'The admin scope can only be granted by a platform admin');
          return redirectOrJson(request, denied);
        }
      }
    }
    const response = await library(c, signedIn ? forwarded : withoutCookie(forwarded));
    return withConsentCode(response, `${pagesOrigin(config)}/consent`);
  });

  // RP-initiated logout ends the session an id_token_hint names only from the user's own browser, the one holding
  // that session's cookie. The library also ended it for a request with no session at all, so an agent's backend
  // could sign the user out with one server-side GET and, with the session, end the access tokens other agents got
  // under it (found by a review; contract.md: a token acts only within its agent). Without a session of its own
  // the request goes on as one without a hint: a browser is asked to confirm, anything else gets invalid_request.
  // The library reads the query and the body together (JSON too), so the hint is looked for in both, and a POST is
  // a form, as OpenID Connect RP-Initiated Logout defines it (a JSON body carried the hint past this check).
  // The browser's session counts only for the user's own doing: a cross-site image, frame or fetch (production
  // cookies are SameSite=None) is another site's, and goes on as a request with no session (review 21).
  router.on(['GET', 'POST'], '/api/auth/oauth2/end-session', async (c) => {
    const raw = c.req.raw;
    const request = requestOfTheUser(raw, trustedOrigins(c.var.deps.config), { crossSiteNavigation: true }) ? raw : withoutCookie(raw);
    const post = request.method === 'POST';
    if (post && !isForm(request)) {
      return oauthError(400, 'invalid_request', 'Send the logout request as a GET or as a form (application/x-www-form-urlencoded)');
    }
    const url = new URL(request.url);
    const form = new URLSearchParams(post ? await request.text() : '');
    const refused = refuseRepeated([...url.searchParams.keys(), ...form.keys()]);
    if (refused) return refused;
    // A form POST reaches the library as the GET it is equivalent to, its fields in the query: the library's origin
    // check refuses every POST that carries a cookie from an origin it does not trust, and an agent's site never is one,
    // so the logout form OpenID Connect defines (a MUST beside the GET) signed nobody out (review 93). The checks here
    // have judged it as the GET is judged: the user's own navigation, and the hint's session.
    const forward = () => {
      const target = new URL(url);
      for (const [name, value] of form) target.searchParams.append(name, value);
      const headers = forwardHeaders(request.headers);
      headers.delete('content-type');
      return new Request(target, { method: post ? 'GET' : request.method, headers });
    };
    const hint = url.searchParams.get('id_token_hint') ?? form.get('id_token_hint');
    if (!hint) return library(c, forward());
    const claims = unverifiedClaims(hint);
    // A hint whose claims hold a NUL is no token we issued; the library would look its client up with it (a 500).
    if (claims && JSON.stringify(claims).includes('\\u0000')) return oauthError(400, 'invalid_request', 'id_token_hint is not a valid token');
    const session = await c.var.deps.auth.api.getSession({ headers: request.headers }).catch(() => null);
    if (session) return library(c, forward());
    const aud = (claims as { aud?: unknown } | undefined)?.aud;
    url.searchParams.delete('id_token_hint');
    form.delete('id_token_hint');
    // the client the hint was for still names where a confirmed logout returns to (checked by the library)
    if (!url.searchParams.has('client_id') && !form.has('client_id') && typeof aud === 'string') url.searchParams.set('client_id', aud);
    return library(c, forward());
  });

  router.post('/api/auth/oauth2/consent', async (c) => {
    const request = c.req.raw;
    const fields = await readFields(request);
    if (!fields) return oauthError(400, 'invalid_request', 'Send the consent as JSON or as a form: { accept, consent_code }');
    const accept = toBoolean(fields.accept);
    if (accept === undefined) return oauthError(400, 'invalid_request', 'accept must be true or false');
    const signedQuery = typeof fields.consent_code === 'string' ? decodeConsentCode(fields.consent_code) : undefined;
    if (!signedQuery) return oauthError(400, 'invalid_request', 'consent_code is missing or malformed');
    const body: Record<string, unknown> = { accept, oauth_query: signedQuery };
    if (typeof fields.scope === 'string' && fields.scope.trim()) body.scope = fields.scope.trim();
    const headers = forwardHeaders(request.headers);
    headers.set('content-type', 'application/json');
    headers.set('accept', 'application/json');
    const response = await library(c, new Request(request.url, { method: 'POST', headers, body: JSON.stringify(body) }));
    if (response.status !== 200) return response;
    const result = (await response.clone().json().catch(() => undefined)) as { url?: unknown; redirect_uri?: unknown } | undefined;
    const url = typeof result?.url === 'string' ? result.url : typeof result?.redirect_uri === 'string' ? result.redirect_uri : undefined;
    if (!url) return response;
    return redirectOrJson(request, url, response.headers);
  });

  router.post('/api/auth/oauth2/token', async (c) => {
    const { config, database, clock } = c.var.deps;
    const request = c.req.raw;
    if (!isForm(request)) return library(c, request);
    const form = new URLSearchParams(await request.text());
    // RFC 8707 lets resource repeat; nothing else may (repeatedParameter says why).
    const refused = refuseRepeated(form.keys(), ['resource']);
    if (refused) return refused;
    // The grant type as the library reads it (it trims it): `authorization_code ` with a trailing space went past every
    // check below to the library's code exchange (found by a review).
    const grantType = form.get('grant_type')?.trim() ?? null;
    if (grantType !== null) form.set('grant_type', grantType);
    // The client authenticates before anything else of the request is looked at (found by a docs review): the library
    // consumes the code first, so a code sent with a wrong secret was used up (anyone who saw a code, in a history or a
    // log, could break that sign-in without the secret), a used one replayed ended the grant's tokens, and a refresh
    // token answered invalid_grant or invalid_client as it was dead or live, to a caller without the secret.
    const refusal = await clientRefused(c, request, form);
    if (refusal) return refusal;
    const caller = requestingClientId(request, form);
    if (grantType === 'authorization_code' || grantType === 'refresh_token') {
      // A token acts only within the agent that owns its client (contract.md, Trust boundaries): its audience is
      // that agent's resource, which the library lets only that client obtain (enforcePerClientResources). JWT
      // access tokens also need an audience to be minted at all; the first-party client's is the API itself.
      const agentId = caller ? await ensureAgentResource(database.db, config, caller, clock.now()) : undefined;
      if (!form.has('resource')) form.set('resource', agentId ? agentAudience(config, agentId) : apiAudience(config));
    }
    const code = grantType === 'authorization_code' ? form.get('code') : null;
    const codeId = code ? await sha256Base64Url(code) : null;
    // Read now: the library consumes the code before it writes the tokens, and before it compares the client, and on a
    // code already used it revokes the tokens issued from it, also before: another agent, authenticated with its own
    // secret, used up a code issued to this one (the user's sign-in broken) or, replaying a used one, ended its grant
    // (found by a review). A code reaches the library only when it is known to be the caller's: pending, or used and
    // still leaving a trace of its grant (then its own client's replay ends that grant, RFC 6749 §4.1.2). Another
    // client's code, and one nobody can tell the client of (unknown, or whose grant is gone), is answered here.
    const codeIssued = codeId ? await pendingCode(database.db, codeId) : undefined;
    const codeClient = codeIssued ? codeIssued.clientId : codeId ? (await redeemedCode(database.db, codeId))?.clientId : undefined;
    if (codeId && codeClient !== caller) return oauthError(400, 'invalid_grant', 'invalid code');
    const codeUser = codeIssued?.userId;
    const presented = grantType === 'refresh_token' ? form.get('refresh_token') : null;
    const before = presented ? await findRefreshToken(database.db, presented) : undefined;
    // Only the token's own client spends its grant's allowance (another agent presenting a token it got hold of is
    // refused by the library, and must not use up the grant's hour).
    const counted =
      before && !before.revoked && before.expiresAt > clock.now() && before.clientId === caller ? refreshAllowanceKey(before) : undefined;
    if (counted) {
      // Counted before the library rotates anything: a refused refresh writes no row. Only a live token counts (a
      // revoked or expired one is refused and writes nothing, and a reused one must still reach the reuse detection).
      const allowance = await takeToken(c.var.deps, counted, REFRESHES_PER_HOUR, HOUR_MS);
      if (!allowance.allowed) {
        return oauthError(429, 'invalid_request', `More than ${REFRESHES_PER_HOUR} refreshes of this grant in an hour; try again later`, {
          'retry-after': String(allowance.retryAfterSec),
        });
      }
    }
    const grantUserId = before?.userId ?? codeUser;
    // Every refresh token a code gives passes here, whichever endpoint issued the code (the library's hooks can issue
    // one after any request that sets the session cookie): its exchange is counted, per client and user, and given back
    // when nothing was issued (CODES_PER_HOUR says why here and not where codes are issued).
    const exchange = codeUser && caller ? `oauth-code-exchange|${caller}|${codeUser}` : undefined;
    if (exchange) {
      const allowance = await takeToken(c.var.deps, exchange, CODES_PER_HOUR, HOUR_MS);
      if (!allowance.allowed) {
        return oauthError(429, 'invalid_request', `More than ${CODES_PER_HOUR} codes of this client exchanged for this user in an hour; try again later`, {
          'retry-after': String(allowance.retryAfterSec),
        });
      }
    }
    // The grant is one transaction (library-database.ts): the code used up, or the refresh token rotated, is kept
    // only with the tokens that replace it and their record, so a 503 here leaves the code or refresh token as it was
    // and the agent's retry works (docs/errors.md). What the new tokens' foreign keys name is taken first, before the
    // library touches a token, in the order the ends take them: the user's row (a password change, ban or consent
    // withdrawal takes it before the user's tokens), the client's (an agent's client deleted takes its tokens with
    // it), the sign-in session's (a sign-out deletes it, and its foreign key then clears the tokens that name it).
    // Otherwise the library's rotation held the old refresh token while the new one's keys waited for a row that
    // such an end held while it waited for the old token: a deadlock (the session's found by review 47).
    const grantSessionId = before?.sessionId ?? codeIssued?.sessionId;
    let libraryStatus = 0;
    const response = await inLibraryTransaction(database, async (db) => {
      if (db.isTransaction) await takeGrantKeys(db, { userId: grantUserId, clientId: caller, sessionId: grantSessionId });
      const answer = await protocolStatus(await library(c, formRequest(request, form)));
      libraryStatus = answer.status;
      if (answer.status !== 200) return answer;
      const body = (await answer.clone().json().catch(() => undefined)) as { access_token?: unknown; refresh_token?: unknown } | undefined;
      if (typeof body?.access_token !== 'string') return answer;
      const issued = issuedAccessToken(body.access_token);
      const newRefreshToken = typeof body.refresh_token === 'string' ? body.refresh_token : undefined;
      const record = async (trx: Db) => {
        // The record's foreign key holds the user's row until this transaction ends. A password change, ban or
        // consent withdrawal locks that row before it revokes the recorded tokens: it either waits for this record
        // (and revokes the token), or has ended the grant before the looks below.
        await recordIssuedAccessToken(trx, issued, codeId ?? before?.authorizationCodeId ?? null, clock.now());
        // The grant ended while its tokens were being made (a password change, ban or consent withdrawal or, for a
        // code, the end of its session): the new refresh token was born revoked or was deleted (migration
        // 20261125001000). Or the agent was deactivated meanwhile, or the user withdrew or narrowed the consent the
        // code was issued or the refresh token's grant was made under.
        const fresh = newRefreshToken ? await findRefreshToken(trx, newRefreshToken) : undefined;
        // (On PostgreSQL no end can overtake a grant since the grant takes the user's, client's and session's rows
        // first, as every end does (reviews 42, 47): this look is a second line there, which no test can make the
        // first; on PGlite the library's statements run outside one transaction.)
        const refreshLive = !newRefreshToken || fresh?.revoked === false;
        if (refreshLive && (await grantStands(trx, issued))) return false;
        await revokeAccessToken(trx, issued.jti, issued.expiresAt);
        if (fresh) await revokeIssuedRefreshToken(trx, fresh.id);
        return true;
      };
      const ended = await (db.isTransaction ? record(db) : db.transaction().execute(record)).catch((error: unknown) => {
        // The user, or the agent with its client, was deleted after the library wrote its tokens: the record's foreign
        // key refuses it. Their deletion took the refresh tokens with it, and the bearer check refuses an access token
        // of a missing user or client, so nothing is left to revoke; the grant ended.
        if (pgCode(error) === '23503') return true;
        throw error;
      });
      return ended ? oauthError(400, 'invalid_grant', 'the grant ended while its tokens were being issued') : answer;
    });
    if (exchange && libraryStatus !== 200) await refundToken(c.var.deps, exchange);
    if (response.status >= 500 && grantUserId && !(await userExists(database.db, grantUserId))) {
      // The user was deleted while the library was writing the new refresh token: the foreign key refused the write.
      // For the agent's backend that is a grant that ended, as any other end answers.
      return oauthError(400, 'invalid_grant', 'the grant ended while its tokens were being issued');
    }
    // Issued (or issued and ended at once), or nothing kept: no refusal of the library's to follow up.
    if (libraryStatus === 200 || response.status >= 500) return response;
    if (codeId) {
      // RFC 6749 §4.1.2: a code used twice was stolen; the library drops the refresh tokens issued from it, we end the
      // family (a refresh of it under way writes into it no more) and revoke the access tokens.
      // (Only the code's own client gets here with a used code: another's replay is refused above.) On PostgreSQL a
      // refresh of that family cannot be under way meanwhile (each grant holds the user's row to its end: reviews 42,
      // 47), so remembering the family is a second line there; on PGlite the library's statements run outside a
      // transaction.
      const redeemed = await redeemedCode(database.db, codeId);
      if (redeemed) {
        await endRefreshTokenFamily(database.db, { ...redeemed, authorizationCodeId: codeId });
        await revokeAccessTokensOfGrant(database.db, codeId, clock.now());
      }
    } else if (before && before.expiresAt > clock.now() && (await presentedAgain(database.db, before, response, caller))) {
      // A refresh token used twice: the family ends (the library's deletion, if it made one, again under the user's
      // row, so a rotation racing it dies too), and the access tokens minted for that client and user die on their
      // next request. Not for an expired token: the library refuses it before anything else, and it is gone because
      // the housekeeping pruned it.
      await endReusedRefreshToken(database.db, before, clock.now());
    }
    return response;
  });

  router.post('/api/auth/oauth2/revoke', async (c) => {
    const { database, clock } = c.var.deps;
    const request = c.req.raw;
    if (!isForm(request)) return library(c, request);
    const form = new URLSearchParams(await request.text());
    const refused = refuseRepeated(form.keys());
    if (refused) return refused;
    // Read as the library reads it, here and in its introspection: a `Bearer ` (or `DPoP `) before the token is dropped.
    // Judged as written, `Bearer <jwt>` was no JWT, so nothing was revoked while the introspection of the same value
    // answered active (review 93's lead): a client checking its revocation that way saw a live token as revoked.
    const token = stripAccessTokenAuthorizationScheme(form.get('token') ?? '');
    const hint = form.get('token_type_hint');
    // The kind is told by the token's shape, not the hint: access tokens are JWTs and refresh tokens opaque here, and
    // with the other kind's hint the library looked only where the token was not and answered 200, revoking nothing
    // (RFC 7009 §2.1: a server that does not find it under the hint searches the other kinds; review 38).
    if (looksLikeJwt(token)) {
      // Ask the library's introspection with the caller's own credentials: it authenticates the client and only
      // calls the token active when it was issued to that client and is still valid.
      const introspection = await introspectAsCaller(c, request, form, token);
      if (await refusesClient(introspection)) return introspection;
      if (introspection.status === 200) {
        const claims = (await introspection.json().catch(() => undefined)) as { active?: unknown; jti?: unknown; exp?: unknown } | undefined;
        if (claims?.active === true && typeof claims.jti === 'string' && typeof claims.exp === 'number') {
          await revokeAccessToken(database.db, claims.jti, new Date(claims.exp * 1000));
        }
      }
      // RFC 7009 §2.2: invalid, expired, unknown or foreign tokens also answer 200.
      return revoked();
    }
    if (hint !== null) form.set('token_type_hint', 'refresh_token');
    const before = token ? await findRefreshToken(database.db, token) : undefined;
    const response = await library(c, formRequest(request, form));
    const state = before ? await refreshTokenState(database.db, before.id) : undefined;
    // Only for the token's own client: another client's revoke answers 200 and revokes nothing, but the owner refreshing
    // at that instant leaves the token not live, which read as this revoke's doing (review 93's lead).
    const own = before !== undefined && before.clientId === requestingClientId(request, form);
    if (response.status === 200 && before && own && !before.revoked && state !== 'live') {
      // RFC 7009 §2.1: revoking a refresh token should also invalidate the access tokens of the same grant.
      if (before.authorizationCodeId) await revokeAccessTokensOfGrant(database.db, before.authorizationCodeId, clock.now());
      else await revokeAccessTokensOfFamily(database.db, before.clientId, before.userId, clock.now());
    }
    if (response.status === 400) {
      const error = (await response.clone().json().catch(() => undefined)) as { error?: unknown } | undefined;
      if (
        error?.error === 'invalid_request' && before && state === 'gone' && own
      ) {
        // A rotated refresh token was revoked (a stale copy the agent's backend still held, or its own refresh rotated
        // it meanwhile): the library, after authenticating the client, took it as a reuse and deleted that client's
        // refresh tokens for the user, expired or not. The grant ends as on the token endpoint, its access tokens with it.
        await endReusedRefreshToken(database.db, before, clock.now());
      }
      if (error?.error === 'invalid_request' || error?.error === 'unsupported_token_type') return revoked();
    }
    // The library's 200 is an empty body labelled JSON, which a client reading every answer as JSON threw on (found by
    // a docs walk-through): every revocation answers the same empty 200 (RFC 7009 §2.2: the body is ignored).
    return response.status === 200 ? revoked() : response;
  });

  router.post('/api/auth/oauth2/introspect', async (c) => {
    const { database, clock, authenticator } = c.var.deps;
    const request = c.req.raw;
    let forwarded = request;
    let token: string | null = null;
    if (isForm(request)) {
      const form = new URLSearchParams(await request.text());
      const refused = refuseRepeated(form.keys());
      if (refused) return refused;
      token = form.get('token');
      forwarded = formRequest(request, form);
    }
    const response = await library(c, forwarded);
    // The library maps only some of jose's refusals to inactive: a JWT with a changed signature, an unknown key id or
    // alg "none" was an empty 500 (review 23). It authenticates the client first, so a 500 here came after that: a
    // token our authenticator refuses (signature first) is one we never issued as it stands, and RFC 7662 says inactive.
    if (response.status === 500 && token && (await refusedBearer(authenticator, request.url, token))) {
      return Response.json({ active: false }, { status: 200, headers: NO_STORE });
    }
    if (response.status !== 200) return response;
    const body = (await response.clone().json().catch(() => undefined)) as Record<string, unknown> | undefined;
    if (body?.active === true && ((await isRevoked(database.db, body, clock.now())) || !(await introspectedGrantStands(database.db, body)))) {
      return Response.json({ active: false }, { status: 200, headers: NO_STORE });
    }
    return response;
  });

  router.on(['GET', 'POST'], '/api/auth/oauth2/userinfo', async (c) => {
    const { authenticator } = c.var.deps;
    const request = c.req.raw;
    let forwarded = request;
    // The token wherever the library finds it: its own parser takes any scheme, or none (a bare "Authorization: <jwt>"
    // went past a Bearer-only reading of ours, and with it past the revocation check; found by a review).
    let token = parseAccessTokenAuthorization(request.headers.get('authorization'))?.token;
    if (request.method === 'POST' && isForm(request)) {
      const form = new URLSearchParams(await request.text());
      const refused = refuseRepeated(form.keys());
      if (refused) return refused;
      token ??= form.get('access_token') ?? undefined;
      forwarded = formRequest(request, form, { clientAuthentication: false });
    } else if (request.method === 'POST' && !request.headers.get('content-type') && !(await request.clone().text())) {
      // OIDC Core §5.3.1: a POST may carry the token in the Authorization header alone, with no body; the library takes
      // only a form POST and answered that one 415 (found by review 41). It is the GET it means.
      forwarded = new Request(request.url, { method: 'GET', headers: forwardHeaders(request.headers) });
    }
    // RFC 6750 §3: a request without a token is challenged (WWW-Authenticate: Bearer), with no error code in the
    // challenge; the library answered 401 without one (found by a docs walk-through).
    if (!token) {
      return Response.json(
        { error: 'invalid_request', error_description: 'access token not found' },
        { status: 401, headers: { ...NO_STORE, 'www-authenticate': 'Bearer' } },
      );
    }
    // The check every API route makes of a bearer token (authenticator.ts): signed by a key we hold, not expired,
    // not revoked, its user not banned, its client and agent live. It verifies the signature before it reads
    // anything (a made-up token's claims, a NUL or an iat past any date, made a lookup by unverified claims fail
    // with a 500; the library itself answers 500 for a key id it does not know).
    const refused = await refusedBearer(authenticator, request.url, token);
    return refused ? invalidToken(refused) : library(c, forwarded);
  });

  // RFC 8414 §3: for an issuer with a path, the metadata lives at /.well-known/oauth-authorization-server/<path>;
  // the library answers it (and the two documents under /api/auth) from its request hook. It knows this one only as
  // /.well-known/oauth-authorization-server<its issuer's whole path>: behind a path prefix (the edge's /functions/v1/api)
  // the prefix goes after the well-known segment, not before it, which left an empty 404 on the edge at the URL every
  // 401 names as `details.authorizationServer` (review 89).
  router.get('/.well-known/oauth-authorization-server/api/auth', async (c) => {
    const url = new URL(c.req.url);
    url.pathname = `/.well-known/oauth-authorization-server${new URL(libraryBaseUrl(c.var.deps.config)).pathname}`;
    return advertiseOurClientAuth(await c.var.deps.auth.handler(new Request(url, withoutDpop(c.req.raw))));
  });
  for (const path of ['/api/auth/.well-known/oauth-authorization-server', '/api/auth/.well-known/openid-configuration']) {
    router.get(path, async (c) => advertiseOurClientAuth(await library(c, c.req.raw)));
  }

  return router;
}

/**
 * Agent clients authenticate with their secret (Basic, or in the form body); the library also advertises
 * private_key_jwt, which no client of ours is registered for, and DPoP, which the service does not check. The
 * documents say what actually works.
 */
async function advertiseOurClientAuth(response: Response): Promise<Response> {
  if (response.status !== 200) return response;
  const metadata = (await response.clone().json().catch(() => undefined)) as Record<string, unknown> | undefined;
  if (!metadata || typeof metadata !== 'object') return response;
  for (const endpoint of ['token', 'introspection', 'revocation']) {
    metadata[`${endpoint}_endpoint_auth_methods_supported`] = ['client_secret_basic', 'client_secret_post'];
    delete metadata[`${endpoint}_endpoint_auth_signing_alg_values_supported`];
  }
  // Tokens are Bearer only (no-dpop.ts), and no client registers a back-channel logout URI (agent clients are made by
  // admins with redirect URIs only).
  delete metadata.dpop_signing_alg_values_supported;
  delete metadata.backchannel_logout_supported;
  delete metadata.backchannel_logout_session_supported;
  // No account chooser: a browser holds one session (the authorize wrapper answers select_account at the
  // redirect_uri; the library stranded the user on its error page while discovery offered it: review 69).
  if (Array.isArray(metadata.prompt_values_supported)) {
    metadata.prompt_values_supported = metadata.prompt_values_supported.filter((p) => p !== 'select_account');
  }
  const headers = new Headers(response.headers);
  headers.delete('content-length');
  return new Response(JSON.stringify(metadata), { status: 200, headers });
}

function isForm(request: Request): boolean {
  return (request.headers.get('content-type') ?? '').toLowerCase().includes('application/x-www-form-urlencoded');
}

/** Headers worth passing on to the library when we rebuild a request (cookies, origin, fetch metadata, auth). */
function forwardHeaders(source: Headers): Headers {
  const headers = new Headers(source);
  headers.delete('content-length');
  headers.delete('transfer-encoding');
  return headers;
}

/**
 * The same request with a (possibly rewritten) form body. `client_secret_post` credentials move into a Basic
 * header: the library binds each client to one authentication method, our agent clients are registered for
 * client_secret_basic, and RFC 6749 lets servers accept both.
 */
/**
 * Asks the library's introspection endpoint about `token` with the caller's own client credentials (those of `form`
 * and its Authorization header): the library authenticates the client, and calls the token active only when it was
 * issued to that client and is still valid.
 */
function introspectAsCaller(c: Context<AppEnv>, request: Request, form: URLSearchParams, token: string): Promise<Response> {
  const probe = new URLSearchParams({ token, token_type_hint: 'access_token' });
  for (const field of ['client_id', 'client_secret', 'client_assertion', 'client_assertion_type']) {
    const value = form.get(field);
    if (value !== null) probe.set(field, value);
  }
  const url = new URL(request.url);
  url.pathname = url.pathname.replace(/\/oauth2\/[a-z]+$/, '/oauth2/introspect');
  url.search = '';
  return library(c, formRequest(request, probe, { url: url.href }));
}

/** The library's answer refuses the client's authentication (401, or 400 invalid_client). */
async function refusesClient(response: Response): Promise<boolean> {
  if (response.status === 401) return true;
  if (response.status !== 400) return false;
  const body = (await response.clone().json().catch(() => undefined)) as { error?: unknown } | undefined;
  return body?.error === 'invalid_client';
}

/**
 * The library's refusal when the caller does not authenticate as the client it names, before anything of the
 * request is read (the library's own check: one definition of client authentication); undefined when it does.
 */
async function clientRefused(c: Context<AppEnv>, request: Request, form: URLSearchParams): Promise<Response | undefined> {
  const probe = await introspectAsCaller(c, request, form, 'client-authentication-probe');
  return (await refusesClient(probe)) ? probe : undefined;
}

/**
 * RFC 6749 §5.2: 401 is the answer to a client that failed to authenticate, and nothing else. The library answers
 * 401 invalid_request to an authenticated client's PKCE mistakes; they become 400, and a code_verifier that does not
 * match its challenge is invalid_grant (RFC 7636 §4.6), which OAuth client libraries treat as "start the sign-in
 * again". So is a code whose user was deleted, or whose session ended (a sign-out, a password change), before its
 * exchange: the library answered invalid_user and invalid_request, codes an agent's backend cannot act on.
 */
async function protocolStatus(response: Response): Promise<Response> {
  if (response.status !== 401 && response.status !== 400) return response;
  const body = (await response.clone().json().catch(() => undefined)) as { error?: unknown; error_description?: unknown } | undefined;
  if (typeof body?.error !== 'string' || body.error === 'invalid_client') return response;
  const description = typeof body.error_description === 'string' ? body.error_description : '';
  if (GRANT_GONE.has(description)) return oauthError(400, 'invalid_grant', description);
  if (response.status === 400) return response;
  return oauthError(400, description === 'code verification failed' ? 'invalid_grant' : body.error, description);
}

/** Takes the rows a grant's new tokens will name (`for key share`, as their foreign keys do), in the ends' order. */
async function takeGrantKeys(db: Db, keys: { userId?: string | undefined; clientId?: string | undefined; sessionId?: string | null | undefined }) {
  if (keys.userId) await sql`select 1 from "user" where id = ${keys.userId} for key share`.execute(db);
  if (keys.clientId) await sql`select 1 from "oauthClient" where "clientId" = ${keys.clientId} for key share`.execute(db);
  if (keys.sessionId) await sql`select 1 from "session" where id = ${keys.sessionId} for key share`.execute(db);
}

/** The library's descriptions of a code whose user or session is gone. */
const GRANT_GONE = new Set(['missing user, user may have been deleted', 'session no longer exists']);

function formRequest(
  original: Request,
  form: URLSearchParams,
  options: { url?: string; clientAuthentication?: boolean } = {},
): Request {
  const headers = forwardHeaders(original.headers);
  const clientId = form.get('client_id');
  const clientSecret = form.get('client_secret');
  const moveSecret = options.clientAuthentication !== false && !headers.has('authorization') && !form.has('client_assertion');
  if (clientId && clientSecret && moveSecret) {
    headers.set('authorization', `Basic ${btoa(`${formEncode(clientId)}:${formEncode(clientSecret)}`)}`);
    form.delete('client_secret');
  }
  headers.set('content-type', 'application/x-www-form-urlencoded');
  return new Request(options.url ?? original.url, { method: 'POST', headers, body: form.toString() });
}

/** RFC 6749 §2.3.1: Basic credentials are form-urlencoded before base64. */
function formEncode(value: string): string {
  return encodeURIComponent(value).replace(/%20/g, '+');
}

/**
 * The authorization request as the library reads it: the query of a GET, the body of a POST (its
 * getAuthorizationRequestParameters), which must be a form, as OAuth defines it (a JSON body went to the library
 * unread by the exact redirect_uri match). A refusal is its reason.
 */
async function readParams(request: Request): Promise<{ params: URLSearchParams; forwarded: Request } | { refused: string }> {
  let read: { params: URLSearchParams; forwarded: Request };
  if (request.method === 'POST') {
    if (!isForm(request)) return { refused: 'Send the authorization request as a GET or as a form (application/x-www-form-urlencoded)' };
    const form = new URLSearchParams(await request.text());
    const headers = forwardHeaders(request.headers);
    read = { params: form, forwarded: new Request(request.url, { method: 'POST', headers, body: form.toString() }) };
  } else {
    read = { params: new URL(request.url).searchParams, forwarded: request };
  }
  const repeated = repeatedParameter(read.params.keys(), ['resource']);
  if (repeated) return { refused: `${repeated} is sent more than once` };
  const oversized = oversizedParameter(read.params);
  return oversized ? { refused: oversized } : read;
}

/**
 * Longest authorization request we pass on, its parameters form-encoded as the library receives them. The library
 * keeps the whole request as the code's `verification` row (and signs it into the consent code): without a bound one
 * posted request stored up to the 1 MiB body limit, as often as a signed-in user sent it (found by a review). 4 KiB
 * signed and base64-encoded still fits the consent code's own bound (MAX_CONSENT_CODE_LENGTH, 8,192 characters), so
 * no request we take makes a consent code we then refuse; a real one is well under 1 KiB.
 */
const MAX_AUTHORIZE_PARAMS_LENGTH = 4096;
/** The client's opaque round-trip values: a random value is some 43 characters; 1,024 leaves room for a return path. */
const MAX_STATE_LENGTH = 1024;

/** Why an authorization request is too large to store, or undefined. */
function oversizedParameter(params: URLSearchParams): string | undefined {
  for (const name of ['state', 'nonce']) {
    if ((params.get(name) ?? '').length > MAX_STATE_LENGTH) return `${name} is longer than ${MAX_STATE_LENGTH} characters`;
  }
  if (params.toString().length > MAX_AUTHORIZE_PARAMS_LENGTH) {
    return `the authorization request's parameters are longer than ${MAX_AUTHORIZE_PARAMS_LENGTH} characters together`;
  }
  return undefined;
}

/** 400 invalid_request naming the first parameter sent more than once (repeatedParameter), or undefined. */
function refuseRepeated(names: Iterable<string>, repeatable: readonly string[] = []): Response | undefined {
  const repeated = repeatedParameter(names, repeatable);
  return repeated ? oauthError(400, 'invalid_request', `${repeated} is sent more than once`) : undefined;
}

/**
 * The first parameter sent more than once, other than those allowed to repeat. RFC 6749 §3.1 and §3.2: request
 * parameters must not be included more than once. Our wrappers read a form with URLSearchParams.get, the first value;
 * the library's form parser keeps the last. A repeated field made them read two different requests: grant_type sent
 * as refresh_token and again as authorization_code redeemed a held-back code past the consent check meant for codes,
 * and a second redirect_uri on a posted authorization went past the exact match (found by a review).
 */
function repeatedParameter(names: Iterable<string>, repeatable: readonly string[] = []): string | undefined {
  const seen = new Set<string>();
  for (const name of names) {
    if (seen.has(name) && !repeatable.includes(name)) return name;
    seen.add(name);
  }
  return undefined;
}

async function readFields(request: Request): Promise<Record<string, unknown> | undefined> {
  const type = (request.headers.get('content-type') ?? '').toLowerCase();
  try {
    if (type.includes('application/json')) {
      const body = await request.json();
      return body && typeof body === 'object' && !Array.isArray(body) ? (body as Record<string, unknown>) : undefined;
    }
    if (type.includes('application/x-www-form-urlencoded')) {
      return Object.fromEntries(new URLSearchParams(await request.text()));
    }
  } catch {
    return undefined;
  }
  return undefined;
}

function toBoolean(value: unknown): boolean | undefined {
  if (value === true || value === 'true') return true;
  if (value === false || value === 'false') return false;
  return undefined;
}

/** userinfo's refusal of a token (RFC 6750 §3.1), in the RFC's shape. */
/** The answer to every revocation the client was authenticated for (RFC 7009 §2.2): 200, empty. */
const revoked = () => new Response(null, { status: 200, headers: NO_STORE });

function invalidToken(description: string): Response {
  return Response.json(
    { error: 'invalid_token', error_description: description },
    { status: 401, headers: { ...NO_STORE, 'www-authenticate': `Bearer error="invalid_token"` } },
  );
}

/**
 * An authorization request's prompt values as the library reads them (split on spaces, each trimmed): the wrapper and
 * the built-in sign-in page judge the same values the library acts on.
 */
export function promptsOf(query: URLSearchParams): string[] {
  return (query.get('prompt') ?? '').split(' ').map((p) => p.trim()).filter(Boolean);
}

/** A JSON array of strings as the library's adapter stores one (an array, or a JSON string inside the jsonb). */
export function jsonStrings(value: unknown): string[] {
  const parsed = typeof value === 'string' ? safeJson(value) : value;
  return Array.isArray(parsed) ? parsed.filter((v): v is string => typeof v === 'string') : [];
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function oauthError(status: 400 | 401 | 429, error: string, description: string, headers: Record<string, string> = {}): Response {
  return Response.json({ error, error_description: description }, { status, headers: { ...NO_STORE, ...headers } });
}

/**
 * Refreshes of one client's grants of one user per hour. Each refresh keeps a refresh-token row for 30 days and an
 * issued-access-token row for 10 hours, so an agent refreshing in a loop grew the shared tables by two rows a request
 * for a month (found by a review). A well-behaved agent refreshes when its access token runs out (10 hours,
 * ACCESS_TOKEN_TTL_SECONDS), or on a 401, a retry after a lost answer, a restart: a few times an hour at worst. 60 an
 * hour (one a minute) leaves that ten times over and keeps one client's refreshes of one user to 1,440 a day.
 */
const REFRESHES_PER_HOUR = 60;
const HOUR_MS = 60 * 60 * 1000;

/** The allowance's key: the client and user of the presented token's row, never the token itself. */
const refreshAllowanceKey = (token: { clientId: string; userId: string }) => `oauth-refresh|${token.clientId}|${token.userId}`;

/**
 * Authorization codes of one client exchanged for one user per hour, by the same allowance (its own key) as refreshes.
 * Each exchange keeps a refresh-token row for 30 days, so an agent seller with its client's secret and one account of
 * its own minted refresh tokens without limit by authorizing again instead of refreshing, past the refresh allowance
 * (found by a review: 100 in a minute). Counted where the tokens are made, not where the codes are issued: only the
 * client can exchange (the code goes to its registered redirect_uri, and the exchange needs its PKCE verifier and
 * credentials), whereas an authorization can be set off by any page that navigates the user's browser, and a refusal
 * there locked the user out of the agent. The codes themselves are bounded where they are stored: at most 10 live per
 * client and user (migration 20261126002200). A user signs in to an agent a few times a day; 60 an hour is the refresh
 * allowance's bound.
 */
const CODES_PER_HOUR = 60;

/**
 * An authorization error sent to the client's redirect_uri (RFC 6749 §4.1.2.1), with the request's state and the
 * issuer (RFC 9207), as the library's own error redirects (discovery says authorization responses carry it). Only for
 * a redirect_uri registered for the client and matched exactly.
 */
function authorizationError(config: Config, to: { redirectUri: string; state: string | null }, error: string, description: string): string {
  const url = new URL(to.redirectUri);
  url.searchParams.set('error', error);
  url.searchParams.set('error_description', description);
  if (to.state) url.searchParams.set('state', to.state);
  url.searchParams.set('iss', libraryBaseUrl(config));
  return url.toString();
}

/**
 * Whether an authorization request may act on the browser's session. A page on another site can make the user's
 * browser send one with the session cookie (production cookies are SameSite=None, for a front end on another
 * origin): an `<img>`, a script, a frame or a fetch. For a user who has consented, each issued a code to the agent that
 * nobody asked for, and a page with ten such images or hidden frames pushed out the code of the user's own sign-in under
 * way (a client keeps 10 live codes per user, migration 20261126002200; found by reviews), and under the former hourly
 * count of issued codes 60 of them locked a victim out of the agent for an hour. What a real authorization is: a
 * top-level navigation (the agent sends the user here, in the window or a popup), a request of our own origin or site,
 * a fetch from a trusted origin (a front end continuing at authorize), or OpenID Connect's silent renew: a frame
 * asking with prompt=none, from a page of the client's own (the Referer's origin is one of its registered redirect
 * URIs'; a browser sends at least the origin cross-site unless the page turns referrers off, and then the renew answers
 * login_required and the agent signs the user in by navigation). Anything else cross-site is taken as signed out: the
 * library sends it to the sign-in page (login_required for prompt=none) and nothing is issued. A page can still navigate
 * a popup it opened on the user's click: a known limit (docs/oauth.md). A request without fetch metadata (not a
 * browser, or an old one) is taken as it comes.
 */
function sessionMayAuthorize(request: Request, config: Config, frame: { silent: boolean; clientPages: string[] }): boolean {
  if (requestOfTheUser(request, trustedOrigins(config), { crossSiteNavigation: true })) return true;
  // A speculative load (prefetch, prerender) is no one's authorization: a page can ask for it without a click.
  if (speculative(request)) return false;
  return request.headers.get('sec-fetch-mode') === 'navigate' && frame.silent && isPageOf(request.headers.get('referer'), frame.clientPages);
}

/** Whether a Referer is a page on the origin of one of these URLs (a client's registered redirect URIs). */
function isPageOf(referer: string | null, urls: string[]): boolean {
  if (!referer || !URL.canParse(referer)) return false;
  const origin = new URL(referer).origin;
  return origin !== 'null' && urls.some((url) => URL.canParse(url) && new URL(url).origin === origin);
}

/** The request without its cookies: the library sees a signed-out caller. */
function withoutCookie(request: Request): Request {
  if (!request.headers.has('cookie')) return request;
  const headers = new Headers(request.headers);
  headers.delete('cookie');
  return new Request(request, { headers });
}

/**
 * Why the check every API route makes of a bearer token (authenticator.ts) refuses this one, or undefined when it
 * holds. It verifies the signature before it reads anything else the token says.
 */
async function refusedBearer(authenticator: Authenticator, url: string, token: string): Promise<string | undefined> {
  // A token is RFC 6750's b64token: anything else (a form value with a line break or a character above U+00FF)
  // cannot even be put in a header to check it, which was a 500 (found by a review).
  if (!/^[A-Za-z0-9\-._~+/]+=*$/.test(token)) return 'The access token holds characters no token has';
  try {
    await authenticator.authenticate(new Request(url, { headers: { authorization: `Bearer ${token}` } }));
    return undefined;
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 401) throw err;
    return err.message;
  }
}

/** The redirect URIs registered for a client, or undefined when there is no such client. */
async function registeredRedirectUris(db: Db, clientId: string): Promise<string[] | undefined> {
  const client = await first<{ redirectUris: unknown }>(
    db,
    sql`select "redirectUris" as "redirectUris" from "oauthClient" where "clientId" = ${clientId}`,
  );
  return client ? jsonStrings(client.redirectUris) : undefined;
}

/**
 * A browser navigation (a form post, a link) gets a 302; a script (fetch / XHR: Sec-Fetch-Mode cors, or no
 * fetch metadata and no form) gets 200 `{ redirect: true, url }` and moves the page itself.
 */
function redirectOrJson(request: Request, url: string, carry?: Headers): Response {
  const mode = request.headers.get('sec-fetch-mode')?.toLowerCase();
  const navigation = mode === 'navigate' || (!mode && (request.method === 'GET' || isForm(request)));
  const headers = new Headers(NO_STORE);
  carry?.forEach((value, key) => {
    if (key.toLowerCase() === 'set-cookie') headers.append(key, value);
  });
  if (navigation) {
    headers.set('location', url);
    return new Response(null, { status: 302, headers });
  }
  headers.set('content-type', 'application/json');
  return new Response(JSON.stringify({ redirect: true, url }), { status: 200, headers });
}

/**
 * The library sends the browser to `{consentPage}?{signed authorize query}`. Our contract (and front end) gets
 * `{consentPage}?consent_code=...`, plus `client_id` and `scope` so a page can show what is asked before it
 * fetches anything; only the code is trusted when the consent is posted.
 */
async function withConsentCode(response: Response, consentPage: string): Promise<Response> {
  const rewrite = (url: string): string | undefined => {
    if (!url.startsWith(`${consentPage}?`)) return undefined;
    const signedQuery = url.slice(consentPage.length + 1);
    const params = new URLSearchParams(signedQuery);
    const target = new URLSearchParams({ consent_code: encodeConsentCode(signedQuery) });
    const clientId = params.get('client_id');
    const scope = params.get('scope');
    if (clientId) target.set('client_id', clientId);
    if (scope) target.set('scope', scope);
    return `${consentPage}?${target}`;
  };
  const location = response.headers.get('location');
  if (location && response.status >= 300 && response.status < 400) {
    const target = rewrite(location);
    if (!target) return response;
    const headers = new Headers(response.headers);
    headers.set('location', target);
    return new Response(null, { status: response.status, headers });
  }
  if (response.status === 200 && (response.headers.get('content-type') ?? '').includes('application/json')) {
    const body = (await response.clone().json().catch(() => undefined)) as { url?: unknown } | undefined;
    const target = typeof body?.url === 'string' ? rewrite(body.url) : undefined;
    if (!target) return response;
    const headers = new Headers(response.headers);
    headers.delete('content-length');
    return new Response(JSON.stringify({ ...body, url: target }), { status: 200, headers });
  }
  return response;
}

/**
 * The client a token request names, read as the library reads it (its extractClientCredentials): an Authorization
 * header names the client by itself (Basic, decoded by the library's own decoder; any other scheme, or a Basic value
 * it cannot decode, fails as invalid_client), and only without one does the form's client_id (once, not repeated).
 * presentedAgain trusts this to be the client the library checked the refresh token against, so it must never differ:
 * reading the form while the header named another client let a caller with no secret have a racing family ended.
 */
export function requestingClientId(request: Request, form: URLSearchParams): string | undefined {
  const authorization = request.headers.get('authorization');
  if (authorization) return basicCredentials(authorization)?.clientId;
  const ids = form.getAll('client_id').filter((id) => id.length > 0);
  return ids.length === 1 ? ids[0] : undefined;
}

/**
 * Whether the library has just refused a refresh token that was used before: its second presentation. Either the token
 * was already rotated and the library ended its family (it does so only after the client authenticated), or two
 * presentations raced: both read the token live, the other one rotated it, and the library refused this one as
 * invalid_grant without counting it as a reuse. Client authentication fails as invalid_client, so an invalid_grant
 * from the token's own client, for a token live and unexpired when the request came, is the lost race.
 */
async function presentedAgain(
  db: Db,
  before: { id: string; clientId: string; revoked: boolean },
  response: Response,
  clientId: string | undefined,
): Promise<boolean> {
  const state = await refreshTokenState(db, before.id);
  if (before.revoked) return state === 'gone';
  // Not live any more: rotated by the other presentation, or gone because this one came after that rotation's UPDATE
  // (the library then read it rotated and deleted the family, before the rotation's INSERT). Gone without this request
  // authenticating means an end deleted it first: ending it again changes nothing.
  if (state === 'live' || response.status !== 400 || clientId !== before.clientId) return false;
  const error = (await response.clone().json().catch(() => undefined)) as { error?: unknown } | undefined;
  return error?.error === 'invalid_grant';
}

/**
 * Makes sure the agent of this client is a resource linked to it (one idempotent SQL call; the identifier holds the
 * service's public URL, which only the service knows). Returns the agent, or undefined for a client of no agent.
 */
async function ensureAgentResource(db: Db, config: Config, clientId: string, now: Date): Promise<string | undefined> {
  const row = await first<{ agentId: string | null }>(
    db,
    sql`select public.ensure_agent_resource(${clientId}, ${config.publicBaseUrl}, ${now}) as "agentId"`,
  );
  return row?.agentId ?? undefined;
}
