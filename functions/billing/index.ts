/**
 * The billing room's public surface: its routers for the composition root (app.ts, deps.ts) and the services other
 * rooms may call. Imports from another room go through that room's index.ts only; .dependency-cruiser.cjs holds the
 * rule and `npm test` checks it (tests/foundation/architecture.once.test.ts).
 */
export { billingRoutes } from './routes.ts';
export { cancelSubscriptionsOnBan } from './cancel-subscription.ts';
export { findActiveSubscription, SUBSCRIPTION_STATUSES, subscriptionSchema, type SubscriptionDto } from './subscriptions.ts';
export { listMarketplaceSubscriptions, subscriptionsWithAgentAndTier } from './subscription-lists.ts';
export { cancelSubscriptionsOnUserRemoval } from './user-removal.ts';
export { undoUnclaimedPurchases, type UnclaimedPurchasesReport } from './unclaimed-purchases.ts';
export { stopRenewalsOfDeletedAgents, type DeletedAgentsReport } from './deleted-agents.ts';
export { rereadOverdueSubscriptions, type OverdueSubscriptionsReport } from './overdue-subscriptions.ts';
export { startBillingRounds } from './billing-rounds.ts';
