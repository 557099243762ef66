import type { OAuthOptions, Scope } from '@better-auth/oauth-provider';
import { pagesOrigin, type Config } from '../../platform/config.ts';

/**
 * Options of the OAuth 2.1 / OIDC provider plugin (@better-auth/oauth-provider), imported by better-auth.ts.
 *
 * What we choose and why:
 * - Pages: the front end's /sign-in and /consent when FRONTEND_URL is set, else our built-in pages
 *   (functions/auth/oauth/pages.ts), which live at the same paths on the service's own origin.
 * - Every agent is a protected resource of its own (`aud` = {PUBLIC_BASE_URL}/agents/{agentId}): a token acts only
 *   within the agent that owns its client. The library only mints JWT access tokens when a `resource` is
 *   requested; protocol-gaps.ts sends the client's own one by default, so every access token is a JWT our
 *   Authenticator can verify locally against the JWKS. The API itself (`aud` = PUBLIC_BASE_URL) is the resource of
 *   the marketplace's first-party client (admin automation) only.
 * - Access tokens live 10 h and carry `role: "authenticated"` (the PostgREST/Supabase role a signed-in user
 *   acts as), whatever the user's marketplace role is: agents act as the user, never as an administrator.
 * - Dynamic registration stays off: every client belongs to an agent and is created by provisionAgentClient.
 * - The library's client and resource registry is closed to everyone, platform admins included (contract.md, Trust
 *   boundaries): closed-endpoints.ts refuses its endpoints before the library sees them, and the privilege hooks
 *   below refuse every action, so an endpoint a library upgrade adds stays closed too. Our own code writes clients
 *   and resources in SQL (agent-clients.ts, public.ensure_agent_resource), never through these endpoints.
 */

export const ACCESS_TOKEN_TTL_SECONDS = 10 * 60 * 60;
export const REFRESH_TOKEN_TTL_SECONDS = 30 * 24 * 60 * 60;
/** Scopes an agent's client may ask for. */
export const OAUTH_SCOPES = ['openid', 'profile', 'email', 'offline_access'] as const;
/**
 * The scope that makes a token an admin credential: only the marketplace's first-party client may ask for it
 * (agent clients are registered without it, so the library refuses it), and only a platform_admin may grant it
 * (protocol-gaps.ts refuses the authorization otherwise).
 */
export const ADMIN_SCOPE = 'admin';

/** The audience of first-party tokens: the marketplace API itself. */
export const apiAudience = (config: Config) => config.publicBaseUrl;

/** The audience (RFC 8707 resource) of an agent's tokens: they act only within that agent. */
export const agentAudience = (config: Config, agentId: string) => `${config.publicBaseUrl}/agents/${agentId}`;


export function oauthProviderOptions(config: Config): OAuthOptions<Scope[]> {
  const pages = pagesOrigin(config);
  return {
    loginPage: `${pages}/sign-in`,
    consentPage: `${pages}/consent`,
    signup: { page: `${pages}/sign-up` },
    scopes: [...OAUTH_SCOPES, ADMIN_SCOPE],
    allowDynamicClientRegistration: false,
    allowUnauthenticatedClientRegistration: false,
    // Every action of the client and resource endpoints (create, read, list, update, delete, rotate, link, ...) is
    // refused for every session: see the header.
    clientPrivileges: () => false,
    resourcePrivileges: () => false,
    accessTokenExpiresIn: ACCESS_TOKEN_TTL_SECONDS,
    refreshTokenExpiresIn: REFRESH_TOKEN_TTL_SECONDS,
    // Any reuse of a rotated refresh token is treated as theft (no grace window for retries).
    refreshTokenReuseInterval: 0,
    // Only what agents need: the code flow and refresh. No machine-to-machine tokens without a user.
    grantTypes: ['authorization_code', 'refresh_token'],
    resources: [{ identifier: apiAudience(config), name: 'Agent Marketplace API', accessTokenTtl: ACCESS_TOKEN_TTL_SECONDS }],
    // RFC 8707 per client: an agent's client is linked only to its agent's resource ({base}/agents/{id}, rows made
    // by public.ensure_agent_resource), the first-party client only to the API itself, so a client can never obtain
    // a token whose audience is another agent.
    enforcePerClientResources: true,
    customAccessTokenClaims: () => ({ role: 'authenticated' }),
    // Our own limiter covers sign-in/up; the library's per-endpoint limits would need its rate-limit storage.
    rateLimit: { token: false, authorize: false, introspect: false, revoke: false, register: false, userinfo: false },
  };
}
