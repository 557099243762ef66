import type { Context } from 'hono';
import { publicCaller } from '../../http/access.ts';
import type { Principal } from '../../http/context.ts';
import type { AppEnv } from '../../platform/app-types.ts';
import { ApiError } from '../../http/errors.ts';

/**
 * Who is looking, on the catalog's public routes. Unlike requireUser, bad credentials are not an error here:
 * a browser holding an expired session cookie still sees the public catalog, as anyone would; valid
 * credentials of an admin add what only admins see. Another site's read with the user's cookie: publicCaller.
 */
export async function viewer(c: Context<AppEnv>): Promise<Principal | null> {
  try {
    return await publicCaller(c);
  } catch (err) {
    if (err instanceof ApiError && err.code === 'UNAUTHORIZED') return null;
    throw err;
  }
}

export async function viewerIsAdmin(c: Context<AppEnv>): Promise<boolean> {
  return (await viewer(c))?.role === 'platform_admin';
}
