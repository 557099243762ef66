import type { OAuthOptions, Scope } from '@better-auth/oauth-provider';
import type { Config } from '../../platform/config.ts';

/**
 * Options of the OAuth 2.1 / OIDC provider plugin (@better-auth/oauth-provider), imported by better-auth.ts.
 *
 * What we choose and why:
 * - Pages: the front end's /sign-in and /consent when FRONTEND_URL is set, else our built-in pages
 *   (functions/auth/oauth/pages.ts), which live at the same paths on the service's own origin.
 * - The marketplace API is the one protected resource (`aud` = PUBLIC_BASE_URL). The library only mints JWT
 *   access tokens when a `resource` is requested; protocol-gaps.ts sends this one by default, so every access
 *   token is a JWT our Authenticator can verify locally against the JWKS.
 * - Access tokens live 10 h and carry `role: "authenticated"` (the PostgREST/Supabase role a signed-in user
 *   acts as), whatever the user's marketplace role is: agents act as the user, never as an administrator.
 * - Dynamic registration stays off: every client belongs to an agent and is created by provisionAgentClient.
 */

export const ACCESS_TOKEN_TTL_SECONDS = 10 * 60 * 60;
export const REFRESH_TOKEN_TTL_SECONDS = 30 * 24 * 60 * 60;
export const OAUTH_SCOPES = ['openid', 'profile', 'email', 'offline_access'] as const;

/** The audience of access tokens: the marketplace API itself. */
export const apiAudience = (config: Config) => config.publicBaseUrl;

/** Where the browser goes to sign in / consent: the front end, or our built-in pages. */
export function oauthPagesOrigin(config: Config): string {
  return config.frontendUrl ?? config.publicBaseUrl;
}

export function oauthProviderOptions(config: Config): OAuthOptions<Scope[]> {
  const pages = oauthPagesOrigin(config);
  return {
    loginPage: `${pages}/sign-in`,
    consentPage: `${pages}/consent`,
    signup: { page: `${pages}/sign-up` },
    scopes: [...OAUTH_SCOPES],
    allowDynamicClientRegistration: false,
    allowUnauthenticatedClientRegistration: false,
    accessTokenExpiresIn: ACCESS_TOKEN_TTL_SECONDS,
    refreshTokenExpiresIn: REFRESH_TOKEN_TTL_SECONDS,
    // Any reuse of a rotated refresh token is treated as theft (no grace window for retries).
    refreshTokenReuseInterval: 0,
    // Only what agents need: the code flow and refresh. No machine-to-machine tokens without a user.
    grantTypes: ['authorization_code', 'refresh_token'],
    resources: [{ identifier: apiAudience(config), name: 'Agent Marketplace API', accessTokenTtl: ACCESS_TOKEN_TTL_SECONDS }],
    // One resource that every agent client may ask for; no per-client link rows to keep in sync.
    enforcePerClientResources: false,
    customAccessTokenClaims: () => ({ role: 'authenticated' }),
    // Our own limiter covers sign-in/up; the library's per-endpoint limits would need its rate-limit storage.
    rateLimit: { token: false, authorize: false, introspect: false, revoke: false, register: false, userinfo: false },
  };
}
