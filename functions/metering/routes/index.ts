import { newRouter } from '../../http/router.ts';
import { meteringAdminRoutes } from './admin.ts';
import { metricRoutes } from './metrics.ts';
import { reservationRoutes } from './reservations.ts';
import { usageRoutes } from './usage.ts';

/** Every metering route: usage and reservations (/me/usage), metric definitions and tier quotas, admin addons/ledger/usage. */
export function meteringRoutes() {
  const router = newRouter();
  router.route('/', usageRoutes());
  router.route('/', reservationRoutes());
  router.route('/', metricRoutes());
  router.route('/', meteringAdminRoutes());
  return router;
}
