import { Hono, type Context, type MiddlewareHandler, type Next } from 'hono';
import type { AppDeps, AppEnv } from '../platform/app-types.ts';
import { first, sql } from '../platform/db.ts';
import { clientSubject, enforceRateLimit } from '../http/rate-limit.ts';
import { creatingFrom } from './organization-limits.ts';
import { answeringInvitation } from './invitation-rules.ts';
import { verifyOnlyInTheAccountsSession } from './email-verification.ts';
import { crossSiteRequest } from './fetch-metadata.ts';
import { isFormMediaType } from '../http/text-guard.ts';
import { userExists } from './oauth/token-records.ts';
import { limitFailedPasswordChanges, limitFailedSignIns } from './failed-sign-ins.ts';
import { keepsAdminRole, selfDemotion } from './set-user-role.ts';
import { signInOnlyWithAStandingPassword } from './sign-in-password-stands.ts';
import { signOutOnlyWhenTheSessionEnds } from './sign-out-ends-the-session.ts';
import { withoutDpop } from './oauth/no-dpop.ts';
import { onThePublicPath } from './public-path.ts';

/**
 * /api/auth/*: the Better Auth handler, behind the rules the library does not have:
 * - rate limits per client IP on sign-in, sign-up, resending the verification mail and the two password-reset
 *   steps, and on failed sign-ins per account (429 RATE_LIMITED); the client address of an organization's creation,
 *   for its daily count per address (organization-limits.ts);
 * - a sign-in keeps its session only if the password it checked was not changed meanwhile (401 otherwise);
 * - a sign-out answers 200 only once its session is gone (503 otherwise, the cookie kept);
 * - no self-demotion through /admin/set-role or /admin/update-user (403 FORBIDDEN);
 * - an address is verified only in a browser signed in to its account (email-verification.ts);
 * - the other domains' part of removing a user (/admin/remove-user), passed in by app.ts as `aroundUserRemoval`.
 * Everything else (its own 401/403 for admin endpoints, BANNED_USER, origin checks) is the library's, in its
 * own response shapes. Routes that must answer before the library (OAuth wrappers) are mounted before this.
 */
/** The library's endpoints our limiter answers first (429 RATE_LIMITED in the envelope), and each one's bucket. */
export const RATE_LIMITED_AUTH_PATHS: ReadonlyArray<readonly [string, string]> = [
  ['/api/auth/sign-in/email', 'sign-in'],
  ['/api/auth/sign-up/email', 'sign-up'],
  ['/api/auth/send-verification-email', 'send-verification-email'],
  ['/api/auth/request-password-reset', 'request-password-reset'],
  ['/api/auth/reset-password', 'reset-password'],
];

/** How long every answer to a password-reset request takes at least, known address or not (mount.ts, review 103). */
export const RESET_REQUEST_ANSWER_MS = 500;

/** Holds the answer back until `ms` have passed since the request reached this point (a wall-clock wait). */
function answerNoSoonerThan(ms: number): MiddlewareHandler<AppEnv> {
  return async (_c, next) => {
    const started = performance.now();
    await next();
    const left = ms - (performance.now() - started);
    if (left > 0) await new Promise((resolve) => setTimeout(resolve, left));
  };
}

export function authLibraryRoutes(options: { aroundUserRemoval: AroundUserRemoval }) {
  const router = new Hono<AppEnv>();
  for (const [path, bucket] of RATE_LIMITED_AUTH_PATHS) {
    router.post(path, async (c, next) => {
      await enforceRateLimit(c, bucket, c.var.deps.config.authRateLimitPerMinute);
      await next();
    });
  }
  // After the per-address limit (a 429 tells nothing of the address asked about): every other answer to a reset
  // request takes the same time, whether the address has an account or not (review 103: one with an account waited
  // for the token's insert, the mailbox's allowance and the mail's transaction, about twice as long; the library pads
  // its verification resend the same way).
  router.post('/api/auth/request-password-reset', answerNoSoonerThan(RESET_REQUEST_ANSWER_MS));
  // The organization plugin's creation hook counts the client address too (organization-limits.ts).
  router.post('/api/auth/organization/create', (c, next) => creatingFrom(clientSubject(c), next));
  // An invitation the database refuses at its insert gives back what the call took (invitation-rules.ts).
  router.post('/api/auth/organization/invite-member', (c, next) => answeringInvitation(c.var.deps, next));
  // After the per-address limit: failed sign-ins per account, from any address (auth/failed-sign-ins.ts).
  router.post('/api/auth/sign-in/email', limitFailedSignIns());
  // Inside the count, so a sign-in refused for a password changed while it was checked counts as a wrong password:
  // a session is kept only if the password it checked still stands (sign-in-password-stands.ts, review 24).
  router.post('/api/auth/sign-in/email', signInOnlyWithAStandingPassword());
  router.post('/api/auth/change-password', limitFailedPasswordChanges());
  router.post('/api/auth/sign-out', signOutOnlyWhenTheSessionEnds());
  router.get('/api/auth/verify-email', verifyOnlyInTheAccountsSession());
  // The library's admin reads (list-users, get-user, ...) by cookie, as ours (requireAdmin): only the admin's own
  // requests, never what another site's page makes the admin's browser send (security rule 29; found by a review:
  // list-users answered an <img> of another site). Its writes are POSTs, under the library's own origin check.
  router.get('/api/auth/admin/*', async (c, next) => {
    if (c.req.header('cookie') && !c.var.deps.authenticator.requestOfTheUser(c.req.raw)) throw crossSiteRequest();
    await next();
  });
  router.post('/api/auth/admin/set-role', refuseSelfDemotion((body) => ({ userId: body?.userId, role: body?.role, changesRole: true })));
  router.post(
    '/api/auth/admin/update-user',
    refuseSelfDemotion((body) => ({
      userId: body?.userId,
      role: body?.data?.role,
      changesRole: body?.data !== null && typeof body?.data === 'object' && 'role' in body.data,
    })),
  );
  router.post('/api/auth/admin/remove-user', async (c, next) => {
    const body = (await c.req.raw.clone().json().catch(() => null)) as { userId?: unknown } | null;
    if (typeof body?.userId !== 'string') return next(); // the library answers its own 400
    const userId = body.userId;
    await options.aroundUserRemoval(c.var.deps, userId, async () => {
      await next();
      // Removed only when the library said so and the row is gone (a refused removal changes nothing elsewhere).
      if (c.res.status !== 200) return false;
      return !(await userExists(c.var.deps.database.db, userId));
    });
  });
  // Two sign-ups of one new address at once both pass the library's "exists?" look, and the later insert fails on the
  // address's unique key: the library answered it 422 FAILED_TO_CREATE_USER, an answer no sign-up of an existing
  // address gets (contract.md: sign-up answers the same for a new and an existing address), and an error for an honest
  // double-click whose account was made (review 104). Such a sign-up is answered again, now as the library answers an
  // address that has an account (200, and the owner's notice mail), once the account is there.
  router.post('/api/auth/sign-up/email', async (c) => {
    const again = c.req.raw.clone();
    const answer = await answerByLibrary(c, c.req.raw);
    if (answer.status !== 422 || (await answer.clone().json().catch(() => null))?.code !== 'FAILED_TO_CREATE_USER') return answer;
    const email = await emailOfSignUp(again.clone());
    if (email === undefined || !(await addressHasAccount(c.var.deps.database.db, email))) return answer;
    return answerByLibrary(c, again);
  });
  router.on(['GET', 'POST'], '/api/auth/*', (c) => answerByLibrary(c, c.req.raw));
  return router;
}

/** The library's answer to `request`, as every request under /api/auth is handed to it. */
async function answerByLibrary(c: Context<AppEnv>, request: Request): Promise<Response> {
  const handed = onThePublicPath(c.var.deps.config, await withEmptyJsonBody(withoutNonBrowserFetchMetadata(withoutEmptyCookie(withoutDpop(request)))));
  return explainMissingOrigin(await c.var.deps.auth.handler(handed));
}

/**
 * The address a sign-up names, read as the library reads its body (review 105: read otherwise, a form whose media type
 * was in capitals, or that named `email` twice, was checked under another address than the one the library tried):
 * the media type compared in lower case, without its parameters; a form's repeated field is its last value.
 */
async function emailOfSignUp(request: Request): Promise<string | undefined> {
  const email = isFormMediaType(request.headers.get('content-type') ?? '')
    ? (await request.formData().catch(() => undefined))?.getAll('email').at(-1)
    : ((await request.json().catch(() => null)) as { email?: unknown } | null)?.email;
  return typeof email === 'string' ? email : undefined;
}

async function addressHasAccount(db: AppDeps['database']['db'], email: string): Promise<boolean> {
  return !!(await first(db, sql`select 1 as found from "user" where lower(email) = lower(${email})`));
}

/**
 * Sign-in without an Origin header (agent backends, scripts). Browsers send Origin on every POST, so a POST
 * with no Origin, no Referer and no cookie cannot be a forged browser request. Some server-side HTTP clients
 * (Node's fetch) still add `Sec-Fetch-Mode: cors`, which makes the library demand an Origin and answer 403
 * MISSING_OR_NULL_ORIGIN; for such requests the fetch-metadata headers are dropped. Requests that carry a
 * cookie keep the library's full origin check.
 */
function withoutNonBrowserFetchMetadata(request: Request): Request {
  const h = request.headers;
  if (request.method !== 'POST' || h.has('origin') || h.has('referer') || h.has('cookie')) return request;
  if (!h.has('sec-fetch-mode') && !h.has('sec-fetch-site') && !h.has('sec-fetch-dest')) return request;
  const headers = new Headers(h);
  headers.delete('sec-fetch-mode');
  headers.delete('sec-fetch-site');
  headers.delete('sec-fetch-dest');
  headers.delete('sec-fetch-user');
  return new Request(request, { headers });
}

/**
 * An empty `Cookie:` header (some HTTP clients send one from an empty cookie jar) carries no session, but the
 * library treats any Cookie header as a browser request and then demands an Origin. It is dropped, so such a
 * request is judged as what it is: a request with no credential.
 */
function withoutEmptyCookie(request: Request): Request {
  const cookie = request.headers.get('cookie');
  if (cookie === null || cookie.trim() !== '') return request;
  const headers = new Headers(request.headers);
  headers.delete('cookie');
  return new Request(request, { headers });
}

/**
 * The library's 403 MISSING_OR_NULL_ORIGIN says "Missing or null Origin" and not why an Origin was wanted:
 * the request carried a cookie, which makes it a browser request that must prove its origin (CSRF). The code
 * stays; the message names the cause and both ways out.
 */
async function explainMissingOrigin(response: Response): Promise<Response> {
  if (response.status !== 403) return response;
  const body = await response.clone().json().catch(() => null);
  if (body?.code !== 'MISSING_OR_NULL_ORIGIN') return response;
  const message =
    'This request carries a Cookie header, so it is checked as a browser request and needs the Origin header of a trusted origin ' +
    '(CSRF protection). A server-side client should send no Cookie header; a browser front end must be served from a trusted origin.';
  const headers = new Headers(response.headers);
  headers.delete('content-length');
  return new Response(JSON.stringify({ ...body, message }), { status: 403, headers });
}

/**
 * Another domain's part of removing a user: it may read what it needs before `remove` (the user's rows go with the
 * user), then learns whether the library removed the user. Billing cancels the user's paid subscriptions
 * (billing/user-removal.ts).
 */
export type AroundUserRemoval = (deps: AppDeps, userId: string, remove: () => Promise<boolean>) => Promise<void>;

type RoleChange = (body: any) => { userId: unknown; role: unknown; changesRole: boolean };

function refuseSelfDemotion(read: RoleChange) {
  return async (c: Context<AppEnv>, next: Next) => {
    let body: unknown;
    try {
      body = await c.req.raw.clone().json();
    } catch {
      return next(); // not JSON: the library answers its own 400
    }
    const change = read(body);
    if (change.changesRole && !keepsAdminRole(change.role) && typeof change.userId === 'string') {
      const session = await c.var.deps.auth.api.getSession({ headers: c.req.raw.headers });
      if (session && session.user.id === change.userId) throw selfDemotion();
    }
    return next();
  };
}


/**
 * Actions without a documented body (sign-out, revoke-sessions, ...) accept a POST with no body and no
 * Content-Type (contract.md section 1); the library wants JSON and would answer 415, so such a request is
 * handed over as `{}`.
 */
async function withEmptyJsonBody(request: Request): Promise<Request> {
  if (request.method !== 'POST' || request.headers.has('content-type')) return request;
  const body = await request.arrayBuffer();
  if (body.byteLength > 0) return new Request(request, { body });
  const headers = new Headers(request.headers);
  headers.set('content-type', 'application/json');
  return new Request(request.url, { method: 'POST', headers, body: '{}' });
}
