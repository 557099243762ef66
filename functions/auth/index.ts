/**
 * The auth room's public surface: its routers for the composition root (app.ts, deps.ts) and the services other
 * rooms may call. Imports from another room go through that room's index.ts only; .dependency-cruiser.cjs holds the
 * rule and `npm test` checks it (tests/foundation/architecture.once.test.ts).
 */
export { authLibraryRoutes, type AroundUserRemoval } from './mount.ts';
export { trustedOriginCors } from './cors.ts';
export { identityRoutes } from './routes.ts';
export { isLastAdminRefusal, lastAdminRefused } from './last-admin.ts';
export { oauthRoutes } from './oauth/routes.ts';
export { AUTH_TAGS, authOpenApi } from './openapi.ts';
export { createAuth, type Auth, type PasswordHashing } from './better-auth.ts';
export { PASSWORD_RESET_SUBJECT } from './account-mails.ts';
export { MAX_NAME_LENGTH } from './library-input.ts';
export { createAuthenticator } from './authenticator.ts';
export { ensureAdmin } from './ensure-admin.ts';
export { ensureSigningKey } from './signing-key.ts';
export { postLogoutRedirectUrisSchema, provisionAgentClient, redirectUrisSchema, renameAgentClient } from './agent-clients.ts';
export { BANNED_NOW, bannedUserSchema, getUser, toUserDto, type UserRow } from './users.ts';
export type { OnUserBanned } from './ban-user.ts';
