import { newRouter } from '../http/router.ts';
import { agentRoutes } from './routes/agents.ts';
import { catalogAdminRoutes } from './routes/admin.ts';
import { communityRoutes } from './routes/community.ts';
import { contentRoutes } from './routes/content.ts';
import { engagementRoutes } from './routes/engagement.ts';
import { pricingRoutes } from './routes/pricing.ts';

export { localFileRoutes } from './routes/files.ts';

/** Every JSON route of the catalog domain. */
export function catalogRoutes() {
  const router = newRouter();
  router.route('/', agentRoutes());
  router.route('/', contentRoutes());
  router.route('/', communityRoutes());
  router.route('/', engagementRoutes());
  router.route('/', pricingRoutes());
  router.route('/', catalogAdminRoutes());
  return router;
}
