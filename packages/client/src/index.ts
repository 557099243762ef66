import createClient from 'openapi-fetch';
import type { paths } from './schema.d.ts';

/**
 * @agent-marketplace/client: what an agent backend needs from the marketplace.
 * - `createMarketplaceClient`: every operation, typed from /openapi.json (openapi-fetch);
 * - `createOAuth`: sign the user in (code + PKCE), refresh, revoke (oauth4webapi);
 * - `createMeter`: usage calls with clientReqIds reused on retry and typed errors;
 * - `verifyWebhook`: agent webhooks (Standard Webhooks).
 */

export interface ClientOptions {
  baseUrl: string;
  /**
   * A bearer token (or a function returning a fresh one), sent on every request but the OAuth token, introspection
   * and revocation endpoints; omit for public or cookie calls.
   */
  accessToken?: string | (() => string | Promise<string>);
  fetch?: typeof fetch;
}

const CLIENT_AUTHENTICATED_PATHS = new Set(['/api/auth/oauth2/token', '/api/auth/oauth2/introspect', '/api/auth/oauth2/revoke']);

export function createMarketplaceClient(options: ClientOptions) {
  const client = createClient<paths>({ baseUrl: options.baseUrl.replace(/\/+$/, ''), ...(options.fetch ? { fetch: options.fetch } : {}) });
  const { accessToken } = options;
  if (accessToken !== undefined) {
    client.use({
      async onRequest({ request, schemaPath }) {
        // The OAuth client authenticates these itself (client_secret_post or Basic): a user's bearer there is a second
        // client authentication, refused (400 invalid_request), and hands the user's token to the token endpoint.
        if (CLIENT_AUTHENTICATED_PATHS.has(schemaPath)) return request;
        request.headers.set('authorization', `Bearer ${typeof accessToken === 'function' ? await accessToken() : accessToken}`);
        return request;
      },
    });
  }
  return client;
}

export type MarketplaceClient = ReturnType<typeof createMarketplaceClient>;
export type { components, operations, paths } from './schema.d.ts';
export { createOAuth, type OAuth, type OAuthOptions, type TokenSet } from './oauth.ts';
export {
  createMeter,
  type AccessTokenRequest,
  type Meter,
  type MeterOptions,
  type MeterResult,
  type Quota,
  type Reservation,
  type UsageRecord,
} from './meter.ts';
export { verifyWebhook, WebhookVerificationError, type WebhookEvent } from './webhooks.ts';
export {
  ApiError,
  apiErrorOf,
  IdempotencyConflictError,
  NetworkError,
  NotFoundError,
  QuotaExceededError,
  RateLimitedError,
  SubscriptionRequiredError,
} from './errors.ts';
