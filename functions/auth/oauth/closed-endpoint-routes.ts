import { Hono } from 'hono';
import { currentPrincipal, unauthorized } from '../../http/access.ts';
import type { AppEnv } from '../../platform/app-types.ts';
import { ApiError } from '../../http/errors.ts';
import { closedEndpointOf, type ClosedEndpoint } from './closed-endpoints.ts';

/**
 * Refuses the auth library's endpoints that nobody may call (the list and why: closed-endpoints.ts): 401 when
 * signed out, 403 when signed in, platform admins included.
 */
/** Mounted first among the /api/auth routes (routes.ts), so it answers before any wrapper or the library. */
export function closedEndpointRoutes() {
  const router = new Hono<AppEnv>();
  router.use('/api/auth/*', async (c, next) => {
    const closed = closedEndpointOf(c.req.path);
    if (!closed) return next();
    if (closed.path === '/oauth2/register') {
      throw unauthorized(c, 'Dynamic client registration is not available: OAuth clients are created with their agent by a platform admin');
    }
    const principal = await currentPrincipal(c).catch(() => null);
    if (!principal) throw unauthorized(c, refusal(closed));
    throw new ApiError('FORBIDDEN', refusal(closed));
  });
  return router;
}

function refusal(closed: ClosedEndpoint): string {
  if (closed.path === '/token') {
    return 'Session JWTs are not issued: agent backends get access tokens from POST /api/auth/oauth2/token';
  }
  return 'OAuth clients are created with their agent and managed by platform admins at /admin/agents/{agentId}/oauth-client';
}
