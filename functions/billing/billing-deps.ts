import type { AppDeps } from '../platform/app-types.ts';

/**
 * What billing's services use of the app's dependencies, and no more: they never authenticate a request, sign a
 * cursor or touch storage. The routes pass the app's AppDeps, which has all of these.
 */
export type BillingDeps = Pick<AppDeps, 'config' | 'database' | 'logger' | 'clock' | 'auth' | 'mailer' | 'payments'>;
