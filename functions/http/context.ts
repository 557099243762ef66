/** Who is calling: resolved from the session cookie first, else from a bearer access token. */
export interface Principal {
  userId: string;
  email: string;
  name: string;
  role: 'user' | 'platform_admin';
  via: 'cookie' | 'bearer';
  /** Session id (cookie) or the token's `sid` claim (bearer). */
  sessionId: string | undefined;
  /** OAuth client the bearer token was issued to. */
  clientId: string | undefined;
  /**
   * The agent a bearer token acts within (its client's agent, named by `aud`); undefined for a cookie session and
   * for the marketplace's first-party client. Routes confine such a caller to this agent (http/access.ts).
   */
  agentId?: string | undefined;
  /** The scopes a bearer token carries (what the user consented to); undefined for a cookie session. */
  scopes?: readonly string[] | undefined;
  /** When the account was created (read with the user row, so GET /me needs no second query). */
  createdAt?: Date | undefined;
}

/** `details.reason` of the 401 for a dead session cookie sent beside a bearer token (app.ts: no invalid_token challenge). */
export const STALE_SESSION_COOKIE = 'stale_session_cookie';

/** `details.reason` of the 403 for a request with the session cookie that another site's page sent (auth/fetch-metadata.ts). */
export const CROSS_SITE_REQUEST = 'cross_site';

export interface AuthenticateOptions {
  /**
   * The route serves a page meant to be opened from links elsewhere (the /admin page): a top-level navigation from
   * another site is the user's there, since the user sees where they land. Such a page must not act on load when
   * `requestOfTheUser` says no (a page of another site can navigate a popup it opened again and again without a click).
   */
  page?: boolean;
}

/** Turns a request's credentials into a principal, or null when there are none. Throws 401 for bad ones. */
export interface Authenticator {
  authenticate(request: Request, options?: AuthenticateOptions): Promise<Principal | null>;
  /**
   * For a hot route that folds the caller check into its own SQL statement (one round trip instead of two):
   * when the request carries a bearer token and no session cookie, verifies the JWT in process (401 when it
   * is bad) and returns what the database must still check; otherwise undefined (use authenticate()).
   */
  bearerCheck(request: Request): Promise<BearerCheck | undefined>;
  /**
   * Whether a browser request to the API was the user's own doing, not another site's riding on their cookie (fetch
   * metadata; a navigation from another site is not: the API is not navigated to, the /admin page is). The rule
   * authenticate() applies to every read with the session cookie outside pages.
   */
  requestOfTheUser(request: Request): boolean;
}

/** A verified access token, pending the database's word on its user (see public.bearer_caller). */
export interface BearerCheck {
  userId: string;
  /** Revocation-list keys that would cancel this token: `user:<sub>`, `jti:<jti>`, `grant:<sid>`. */
  tokenKeys: string[];
  issuedAt: Date;
  /** The client the token was issued to (`client_id`). */
  clientId: string;
  /** The agent the token's audience names; null for the first-party client (audience: the API itself). */
  agentId: string | null;
  /** The principal when public.bearer_caller said 'ok'; else throws the 401. */
  principal(caller: BearerCaller): Principal;
}

/** A row of public.bearer_caller (status 'ok' | 'no_user' | 'revoked' | 'banned' | 'wrong_client'). */
export interface BearerCaller {
  status: string;
  email: string | null;
  name: string | null;
  role: string | null;
  createdAt: Date | string | null;
}

