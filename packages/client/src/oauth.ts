import * as oauth from 'oauth4webapi';

/**
 * Signing a marketplace user in to an agent: the OAuth 2.1 authorization-code flow with PKCE, token refresh with
 * rotation, and revocation, for the agent's confidential client, on oauth4webapi (discovery, PKCE, state, the
 * token responses and the ID token are checked by it, not by hand).
 *
 *   const signIn = createOAuth({ issuer: 'https://api.marketplace.example/api/auth', clientId, clientSecret, redirectUri });
 *   const { url, state, codeVerifier } = await signIn.authorizationUrl();   // send the browser to url; keep the rest
 *   const tokens = await signIn.exchangeCode(callbackUrl, { state, codeVerifier });
 */

export interface OAuthOptions {
  /** The marketplace's OAuth issuer: `{base_url}/api/auth`. */
  issuer: string;
  clientId: string;
  clientSecret: string;
  redirectUri: string;
  /** Default: `openid profile email offline_access` (offline_access: a refresh token). */
  scope?: string;
  /** Allow an http:// issuer (local development only). */
  allowInsecureHttp?: boolean;
  /**
   * Longest wait for any answer of the marketplace (discovery, tokens, revocation), in ms (default 30 000). Without a
   * bound a refresh that never got its answer would hold every caller sharing it for good.
   */
  timeoutMs?: number;
}

export interface TokenSet {
  accessToken: string;
  /** Rotates on every refresh: store the new one before using the new access token. */
  refreshToken: string | undefined;
  idToken: string | undefined;
  scope: string | undefined;
  expiresAt: Date;
}

/** How long a refresh's result is handed to late callers still holding the refresh token it used. */
const REFRESH_KEPT_MS = 60_000;

export function createOAuth(options: OAuthOptions) {
  const client: oauth.Client = { client_id: options.clientId };
  const clientAuth = oauth.ClientSecretBasic(options.clientSecret);
  const timeoutMs = options.timeoutMs ?? 30_000;
  const http = {
    ...(options.allowInsecureHttp ? { [oauth.allowInsecureRequests]: true } : {}),
    signal: () => AbortSignal.timeout(timeoutMs),
  };
  let discovered: Promise<oauth.AuthorizationServer> | undefined;
  const server = () => {
    discovered ??= (async () => {
      const issuer = new URL(options.issuer);
      return oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { ...http, algorithm: 'oidc' }));
    })().catch((err) => {
      discovered = undefined;
      throw err;
    });
    return discovered;
  };
  /** Refreshes in flight or just done, by the refresh token they presented (see refresh). */
  const refreshes = new Map<string, { result: Promise<TokenSet>; keepUntil: number }>();
  const tokenSet = (t: oauth.TokenEndpointResponse): TokenSet => ({
    accessToken: t.access_token,
    refreshToken: t.refresh_token,
    idToken: t.id_token,
    scope: t.scope,
    expiresAt: new Date(Date.now() + (t.expires_in ?? 0) * 1000),
  });

  return {
    /** Where to send the user's browser, and what to keep (server side, with the user's session) until the callback. */
    async authorizationUrl(): Promise<{ url: string; state: string; codeVerifier: string }> {
      const as = await server();
      const codeVerifier = oauth.generateRandomCodeVerifier();
      const state = oauth.generateRandomState();
      const url = new URL(as.authorization_endpoint!);
      url.search = new URLSearchParams({
        response_type: 'code',
        client_id: options.clientId,
        redirect_uri: options.redirectUri,
        scope: options.scope ?? 'openid profile email offline_access',
        state,
        code_challenge: await oauth.calculatePKCECodeChallenge(codeVerifier),
        code_challenge_method: 'S256',
      }).toString();
      return { url: url.href, state, codeVerifier };
    },

    /** The callback URL the browser landed on (with `code`, `state`, `iss`) for tokens; checks state and issuer. */
    async exchangeCode(callbackUrl: string | URL, expected: { state: string; codeVerifier: string }): Promise<TokenSet> {
      const as = await server();
      const params = oauth.validateAuthResponse(as, client, new URL(callbackUrl), expected.state);
      const response = await oauth.authorizationCodeGrantRequest(as, client, clientAuth, params, options.redirectUri, expected.codeVerifier, http);
      return tokenSet(await oauth.processAuthorizationCodeResponse(as, client, response));
    },

    /**
     * A new access token; the refresh token rotates (the old one is refused from now on). Calls with the same refresh
     * token share one request, and for a minute after it callers still holding that token get the same new tokens:
     * the service takes a refresh token presented twice for a stolen one and ends the user's grant, so two requests
     * of one user refreshing at the same moment would sign the user out. (Across processes, refresh one user at a time
     * yourself: a lock in the store that holds the tokens.)
     */
    refresh(refreshToken: string): Promise<TokenSet> {
      const now = Date.now();
      for (const [token, known] of refreshes) if (known.keepUntil < now) refreshes.delete(token);
      const known = refreshes.get(refreshToken);
      if (known) return known.result;
      const entry = {
        keepUntil: Infinity,
        result: (async () => {
          const as = await server();
          const response = await oauth.refreshTokenGrantRequest(as, client, clientAuth, refreshToken, http);
          return tokenSet(await oauth.processRefreshTokenResponse(as, client, response));
        })(),
      };
      refreshes.set(refreshToken, entry);
      entry.result.then(
        () => (entry.keepUntil = Date.now() + REFRESH_KEPT_MS),
        () => refreshes.delete(refreshToken), // a failed refresh is not kept: the caller decides what comes next
      );
      return entry.result;
    },

    /** Revokes a refresh token (the user disconnected the agent) or an access token. */
    async revoke(token: string, hint: 'refresh_token' | 'access_token' = 'refresh_token'): Promise<void> {
      const as = await server();
      const response = await oauth.revocationRequest(as, client, clientAuth, token, { ...http, additionalParameters: { token_type_hint: hint } });
      await oauth.processRevocationResponse(response);
    },
  };
}

export type OAuth = ReturnType<typeof createOAuth>;
