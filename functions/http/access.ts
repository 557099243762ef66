import type { Context, MiddlewareHandler } from 'hono';
import { first, sql } from '../platform/db.ts';
import { signInUrls } from '../platform/config.ts';
import { CROSS_SITE_REQUEST, type BearerCheck, type Principal } from './context.ts';
import type { AppEnv } from '../platform/app-types.ts';
import { ApiError } from './errors.ts';

/**
 * Authorization helpers every route uses. The principal is looked up at most once per request, and only by
 * routes that ask for it, so public routes never touch the session store.
 */

export function currentPrincipal(c: Context<AppEnv>): Promise<Principal | null> {
  let p = c.get('principal');
  if (!p) {
    p = c.var.deps.authenticator.authenticate(c.req.raw);
    c.set('principal', p);
  }
  return p;
}

export function unauthorized(c: Context<AppEnv>, message = 'Sign in to continue'): ApiError {
  return new ApiError('UNAUTHORIZED', message, signInUrls(c.var.deps.config));
}

/** Any signed-in user (cookie session or bearer token). */
export async function requireUser(c: Context<AppEnv>): Promise<Principal> {
  const principal = await currentPrincipal(c);
  if (!principal) throw unauthorized(c);
  return principal;
}

/**
 * The caller of a bearer-only route (usage writes, reservations: contract.md, Trust boundaries): a bearer token, whose
 * liveness (revoked, banned, client disabled) and agent the route's one statement then confirm. 401 without credentials
 * (or with a bad token); 403 for a cookie session, the user's own browser, which must not change what it used.
 */
export async function requireBearer(c: Context<AppEnv>): Promise<BearerCheck> {
  const check = await c.var.deps.authenticator.bearerCheck(c.req.raw);
  if (check) return check;
  await requireUser(c);
  throw cookieOnBearerOnly();
}

/**
 * The same judgement before a bearer-only route's input is (router.ts), where no statement of the route will run: the
 * whole caller check, so a revoked or banned caller's token is 401 there too (review 111: the token's signature alone
 * let it learn the input's issues), then a cookie session is refused 403 as a cookie, whatever it sent.
 */
export async function requireBearerCaller(c: Context<AppEnv>): Promise<Principal> {
  const principal = await requireUser(c);
  if (principal.via !== 'bearer') throw cookieOnBearerOnly();
  return principal;
}

function cookieOnBearerOnly(): ApiError {
  return new ApiError('FORBIDDEN', "Usage is changed by the agent's backend with its bearer token; a cookie session can only read usage");
}

/** A platform admin; 401 when signed out, 403 when signed in without the role. */
export async function requireAdmin(c: Context<AppEnv>): Promise<Principal> {
  const principal = await requireUser(c);
  if (principal.role !== 'platform_admin') {
    throw new ApiError('FORBIDDEN', 'This action needs the platform_admin role');
  }
  // What another site's page makes the admin's browser send with the cookie (an `<img>` of the five-year analytics
  // window, a popup it navigates) never gets here: the authenticator refuses it for every route (security rule 29).
  return principal;
}

/**
 * Who is calling, on a public route (one that answers anyone): a read another site's page sent with the user's cookie,
 * which the authenticator refuses for the routes that need the user (security rule 29), is served as anyone's here,
 * as it would be without the cookie (a third party's page showing the public catalog works the same for everyone).
 */
export async function publicCaller(c: Context<AppEnv>): Promise<Principal | null> {
  try {
    return await currentPrincipal(c);
  } catch (err) {
    if (err instanceof ApiError && err.details.reason === CROSS_SITE_REQUEST) return null;
    throw err;
  }
}

/** Whether the caller of a public route is a platform admin (who sees what is not published yet). */
export async function isAdmin(c: Context<AppEnv>): Promise<boolean> {
  return (await publicCaller(c))?.role === 'platform_admin';
}

const UUID_SHAPE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Whether the caller may learn the user's email address: the user's own session, or an agent's token the user granted
 * the `email` scope (contract.md: GET /me with a bearer token answers what its scopes allow). Every answer that would
 * tell an agent the address asks this (review 27: the waitlist status confirmed guessed addresses to an agent denied it).
 */
export function seesEmail(principal: Principal): boolean {
  return !principal.agentId || (principal.scopes ?? []).includes('email');
}

/** Refusal of a bearer token outside its agent (contract.md, Trust boundaries). */
export function otherAgent(): ApiError {
  return new ApiError('FORBIDDEN', "This access token acts only within its own agent; this request names another agent");
}

/**
 * A bearer token acts only within the agent that owns its client: a route whose path names another agent answers
 * 403 FORBIDDEN, whatever the route (public reads included). Decided in process from the token's verified audience
 * (the authenticator caches verified tokens), so it adds no round trip; the database confirms the token's client
 * belongs to that agent when the route authenticates (public.bearer_caller). Cookie sessions and the first-party
 * client's tokens name no agent and pass. Mounted on every path with an `:agentId` segment (app.ts).
 */
export function agentBoundary(): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const check = await c.var.deps.authenticator.bearerCheck(c.req.raw);
    if (check?.agentId) {
      const named = await namedAgent(c);
      if (named !== undefined && named !== check.agentId) throw otherAgent();
    }
    await next();
  };
}

/**
 * What the route's path names of an agent, as written: its id (an :agentId parameter) or its slug under
 * /agents/by-slug/; null when it names none. The one definition of "this path names an agent", for the agent
 * boundary here and the public routes' bad-bearer 401 (catalog/routes/viewer.ts).
 */
export function agentInPath(c: Context<AppEnv>): { agentId: string } | { slug: string } | null {
  // The slug first: middleware mounted on /agents/:agentId/* reads /agents/by-slug/x as agentId 'by-slug'.
  const slug = /^\/agents\/by-slug\/([^/]+)$/.exec(c.req.path)?.[1];
  if (slug !== undefined) return { slug };
  const agentId = c.req.param('agentId');
  return agentId === undefined ? null : { agentId };
}

/** The agent the path names, resolved to its id; undefined when it names none (or none that can exist). */
async function namedAgent(c: Context<AppEnv>): Promise<string | undefined> {
  const named = agentInPath(c);
  if (named === null) return undefined;
  if ('agentId' in named) return UUID_SHAPE.test(named.agentId) ? named.agentId.toLowerCase() : undefined;
  const slug = named.slug;
  let decoded: string;
  try {
    decoded = decodeURIComponent(slug);
  } catch {
    return undefined; // not a slug: the route answers its own 400/404
  }
  // Published agents only: an unpublished one is invisible to every agent's token (the route answers 404), and a
  // 403 for a draft's slug against a 404 for an unknown one would tell any agent backend which drafts exist.
  const row = await first<{ id: string }>(
    c.var.deps.database.db,
    sql`select id from public.agents where slug = ${decoded} and public.agent_is_published(status)`,
  );
  return row?.id ?? undefined;
}

/**
 * For a route whose agent is not in its path (checkout by tier, a checkout session, the billing portal): a bearer
 * token acts only within its own agent, 403 otherwise. Cookie sessions and first-party tokens pass.
 */
export function requireWithinAgent(principal: Principal, agentId: string | null | undefined): void {
  if (principal.agentId && principal.agentId !== agentId) throw otherAgent();
}
