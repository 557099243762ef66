/**
 * The internal room's public surface: its routers for the composition root (app.ts, deps.ts) and the services other
 * rooms may call. Imports from another room go through that room's index.ts only; .dependency-cruiser.cjs holds the
 * rule and `npm test` checks it (tests/foundation/architecture.once.test.ts).
 */
export { internalRoutes } from './routes.ts';
export { startHousekeeping } from './background-work.ts';
