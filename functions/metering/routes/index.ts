import { newRouter } from '../../http/router.ts';
import { meteringAdminRoutes } from './admin.ts';
import { metricRoutes } from './metrics.ts';
import { usageRoutes } from './usage.ts';

/** Every metering route: usage (/me/usage), metric definitions and tier quotas, admin addons/ledger/usage. */
export function meteringRoutes() {
  const router = newRouter();
  router.route('/', usageRoutes());
  router.route('/', metricRoutes());
  router.route('/', meteringAdminRoutes());
  return router;
}
