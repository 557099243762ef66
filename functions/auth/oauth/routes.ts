import type { Config } from '../../platform/config.ts';
import { newRouter } from '../../http/router.ts';
import { agentClientAdminRoutes } from './admin-routes.ts';
import { closedEndpointRoutes } from './closed-endpoint-routes.ts';
import { authorizationErrorPage } from './error-page.ts';
import { oauthPages } from './pages.ts';
import { oauthProtocolRoutes } from './protocol-gaps.ts';

/**
 * Everything of the OAuth 2.1 / OIDC server that is ours rather than the library's: the wrappers in front of its
 * endpoints, the built-in sign-in/sign-up/consent pages, and the admin endpoints of agent clients.
 * Mounted before the library's catch-all /api/auth/* handler, so the wrappers answer first; the library endpoints
 * nobody may call (client registry, session JWTs: closed-endpoints.ts) are refused before everything else.
 */
export function oauthRoutes(config: Config) {
  const router = newRouter();
  router.route('/', closedEndpointRoutes());
  router.route('/', oauthProtocolRoutes());
  router.route('/', oauthPages(config));
  router.route('/', authorizationErrorPage());
  router.route('/', agentClientAdminRoutes());
  return router;
}
