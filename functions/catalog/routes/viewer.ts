import type { Context } from 'hono';
import { agentInPath, publicCaller } from '../../http/access.ts';
import type { Principal } from '../../http/context.ts';
import type { AppEnv } from '../../platform/app-types.ts';
import { ApiError } from '../../http/errors.ts';

/**
 * Who is looking, on the catalog's public routes. Unlike requireUser, a stale session cookie is not an error here:
 * a browser holding an expired session still sees the public catalog, as anyone would; valid credentials of an admin
 * add what only admins see. Another site's read with the user's cookie: publicCaller. On a path that names an agent, a
 * bearer token that is not valid (revoked, its user banned or removed) is the 401 /openapi.json promises there: an agent
 * backend must learn that its grant is gone, and such a read answered it 200 as anonymous (review 82; the agent
 * boundary checks only the signature and the expiry, the revocation is the authenticator's). Elsewhere (the catalog's
 * lists) it reads as anyone.
 */
export async function viewer(c: Context<AppEnv>): Promise<Principal | null> {
  try {
    return await publicCaller(c);
  } catch (err) {
    if (err instanceof ApiError && err.code === 'UNAUTHORIZED' && !(agentInPath(c) !== null && /^bearer\s/i.test(c.req.header('authorization') ?? ''))) return null;
    throw err;
  }
}

export async function viewerIsAdmin(c: Context<AppEnv>): Promise<boolean> {
  return (await viewer(c))?.role === 'platform_admin';
}
