import type { Context } from 'hono';
import { signInUrls } from '../platform/config.ts';
import type { AppEnv, Principal } from './context.ts';
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

/** A platform admin; 401 when signed out, 403 when signed in without the role. */
export async function requireAdmin(c: Context<AppEnv>): Promise<Principal> {
  const principal = await requireUser(c);
  if (principal.role !== 'platform_admin') {
    throw new ApiError('FORBIDDEN', 'This action needs the platform_admin role');
  }
  return principal;
}

export async function isAdmin(c: Context<AppEnv>): Promise<boolean> {
  return (await currentPrincipal(c))?.role === 'platform_admin';
}
