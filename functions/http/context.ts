import type { AppDeps } from '../app.ts';

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
  /** When the account was created (read with the user row, so GET /me needs no second query). */
  createdAt?: Date | undefined;
}

/** Turns a request's credentials into a principal, or null when there are none. Throws 401 for bad ones. */
export interface Authenticator {
  authenticate(request: Request): Promise<Principal | null>;
}

export interface AppEnv {
  Variables: {
    requestId: string;
    deps: AppDeps;
    /** Memoized principal lookup for this request (see http/access.ts). */
    principal: Promise<Principal | null> | undefined;
  };
}
