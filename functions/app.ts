import { HTTPException } from 'hono/http-exception';
import type { Context } from 'hono';
import type { AppDeps, AppEnv } from './platform/app-types.ts';
import { failure } from './http/envelope.ts';
import { ApiError, errorStatus, type ErrorCode } from './http/errors.ts';
import { newRouter } from './http/router.ts';
import { agentBoundary } from './http/access.ts';
import { STALE_SESSION_COOKIE } from './http/context.ts';
import { loggedUrl, requestContext } from './http/request-context.ts';
import { rejectUnstorableText } from './http/text-guard.ts';
import { limitBodySize } from './http/body-limit.ts';
import { docsRoutes } from './http/docs.ts';
import { openApiDocument } from './openapi-document.ts';
import { healthRoutes } from './health/index.ts';
import { catalogRoutes, localFileRoutes } from './catalog/index.ts';
import { meteringRoutes } from './metering/index.ts';
import {
  authLibraryRoutes,
  identityRoutes,
  isLastAdminRefusal,
  lastAdminRefused,
  oauthRoutes,
  trustedOriginCors,
} from './auth/index.ts';
import { billingRoutes, cancelSubscriptionsOnBan, cancelSubscriptionsOnUserRemoval } from './billing/index.ts';
import { adminRoutes } from './admin/index.ts';
import { webhookRoutes } from './webhooks/index.ts';
import { internalRoutes } from './internal/index.ts';
import { signInUrls, type Config } from './platform/config.ts';
import { isConnectionLost, isTransientConflict } from './platform/db.ts';

/**
 * Composition root. Everything the application needs arrives as an argument (AppDeps, http/context.ts), so the same
 * code serves Node, Deno and tests. Nothing in here reads the environment or the file system.
 */
export const MAX_BODY_BYTES = 1024 * 1024;

export function createApp(deps: AppDeps) {
  const app = newRouter();

  app.use('*', requestContext(deps));
  app.use('*', trustedOriginCors(deps.config));
  // Local uploads stream files larger than the JSON body limit, so they are answered before it applies.
  app.route('/', localFileRoutes(deps.storage, deps.files));

  app.use(
    '*',
    limitBodySize(MAX_BODY_BYTES, (c) =>
      c.json(failure('PAYLOAD_TOO_LARGE', 'The request body is larger than 1 MiB', { maxBytes: MAX_BODY_BYTES }), 413),
    ),
  );
  app.use('*', rejectUnstorableText());
  // Every path that names an agent: a bearer token acts only within its own agent (403 otherwise).
  for (const path of [
    '/agents/:agentId',
    '/agents/:agentId/*',
    '/me/usage/:agentId',
    '/me/usage/:agentId/*',
    '/me/subscriptions/:agentId',
    '/me/subscriptions/:agentId/*',
    '/admin/agents/:agentId/*',
  ]) {
    app.use(path, agentBoundary());
  }

  app.onError((err, c) => errorResponse(err, c as unknown as Context<AppEnv>, deps));
  app.notFound((c) => c.json(failure('NOT_FOUND', `No route for ${c.req.method} ${c.req.path}`), 404));

  app.route('/', healthRoutes());
  app.route('/', catalogRoutes());
  app.route('/', meteringRoutes());
  // A ban's billing side (cancel subscriptions when asked), wired here rather than by a side effect of billingRoutes.
  app.route('/', identityRoutes({ onUserBanned: cancelSubscriptionsOnBan }));
  app.route('/', billingRoutes());
  app.route('/', adminRoutes());
  app.route('/', webhookRoutes());
  app.route('/', internalRoutes());
  app.route('/', oauthRoutes(deps.config));
  // Last of the /api/auth routes: wrappers that must answer first (OAuth) are mounted above this line.
  app.route('/', authLibraryRoutes({ aroundUserRemoval: cancelSubscriptionsOnUserRemoval }));

  const documentConfig: Parameters<typeof app.getOpenAPI31Document>[0] = {
    openapi: '3.1.0',
    info: {
      title: 'Agent Marketplace API',
      version: deps.config.releaseVersion,
      description:
        'Catalog, pricing tiers, Stripe subscriptions, usage metering, sessions and an OAuth 2.1 / OIDC server for agent backends. ' +
        'Every JSON response outside /api/auth uses the envelope `{ status, data, error }`.',
    },
    servers: [{ url: deps.config.publicBaseUrl }],
  };
  // Built on first request (every route is registered by then), with the auth library's operations merged in.
  let document: Promise<Record<string, unknown>> | undefined;
  app.get('/openapi.json', async (c) => {
    document ??= openApiDocument(app.getOpenAPI31Document(documentConfig), deps.auth).catch((err) => {
      document = undefined;
      throw err;
    });
    return c.json(await document);
  });
  // The document describes itself too (contract: getOpenApi), so a generated client can fetch it.
  app.openAPIRegistry.registerPath({
    operationId: 'getOpenApi',
    method: 'get',
    path: '/openapi.json',
    tags: ['Health and docs'],
    summary: 'This OpenAPI 3.1 document',
    responses: { 200: { description: 'The OpenAPI document', content: { 'application/json': { schema: { type: 'object' } } } } },
  });
  app.openAPIRegistry.registerComponent('securitySchemes', 'cookieSession', {
    type: 'apiKey',
    in: 'cookie',
    name: 'better-auth.session_token',
  });
  app.openAPIRegistry.registerComponent('securitySchemes', 'bearer', { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' });
  app.route('/', docsRoutes({ script: deps.docsScript }));

  return app;
}

export type App = ReturnType<typeof createApp>;

function errorResponse(err: unknown, c: Context<AppEnv>, deps: AppDeps): Response {
  // The database's rule that one usable admin remains (migration 20261127000400), whichever route wrote the row.
  if (isLastAdminRefusal(err)) return errorResponse(lastAdminRefused(), c, deps);
  if (err instanceof ApiError) {
    if (err.code === 'UNAUTHORIZED') return unauthorizedResponse(c, deps.config, err.message, err.details, err.headers);
    return c.json(failure(err.code, err.message, err.details), err.status, err.headers);
  }
  if (err instanceof HTTPException) {
    const byStatus: Record<number, ErrorCode> = {
      400: 'VALIDATION_ERROR',
      401: 'UNAUTHORIZED',
      403: 'FORBIDDEN',
      404: 'NOT_FOUND',
      413: 'PAYLOAD_TOO_LARGE',
      415: 'UNSUPPORTED_MEDIA_TYPE',
    };
    const code = byStatus[err.status];
    if (code) {
      const message =
        code === 'UNSUPPORTED_MEDIA_TYPE'
          ? 'Send the body as application/json'
          : code === 'VALIDATION_ERROR' && /json/i.test(err.message)
            ? 'The body is not valid JSON'
            : err.message || code;
      if (code === 'UNAUTHORIZED') return unauthorizedResponse(c, deps.config, message);
      // contract.md: every VALIDATION_ERROR lists `details.issues` (a body that was not JSON at all had none, and a
      // client reading them as documented threw instead of reporting the bad request: review 56).
      const details = code === 'VALIDATION_ERROR' ? { issues: [{ path: /json/i.test(err.message) ? 'body' : 'request', message }] } : {};
      return c.json(failure(code, message, details), errorStatus[code]);
    }
  }
  const requestId = c.get('requestId');
  if (isConnectionLost(err)) {
    // The database restarted, failed over or dropped the connection: the client can retry (contract: 503).
    deps.logger.warn('database connection lost during the request', { requestId, method: c.req.method, path: loggedUrl(c).path, err });
    return c.json(failure('UNAVAILABLE', 'The database is not reachable right now; retry shortly', { requestId }), 503, { 'Retry-After': '1' });
  }
  if (isTransientConflict(err)) {
    // PostgreSQL ended the transaction to break a deadlock or a serialization conflict with another request, and
    // kept nothing of that transaction (a request of several may have kept its earlier steps, which every such
    // request makes safe to repeat): the same request, sent again, is expected to pass (contract: 503 means retry).
    deps.logger.warn('a concurrent change ended the request\'s transaction', { requestId, method: c.req.method, path: loggedUrl(c).path, err });
    return c.json(
      failure('UNAVAILABLE', 'The request met a concurrent change and stopped; send it again', { requestId, reason: 'concurrent_change' }),
      503,
      { 'Retry-After': '1' },
    );
  }
  deps.logger.error('unhandled error', { requestId, method: c.req.method, path: loggedUrl(c).path, err });
  return c.json(failure('INTERNAL', 'Internal error', { requestId }), 500);
}

/**
 * Every 401 outside /api/auth. A front end gets the contract's `details.signInUrl` and `signUpUrl`; an agent
 * backend, for which a sign-in page means nothing, gets where tokens come from: `details.authorizationServer` (the
 * OAuth metadata document: authorization, token, revocation endpoints) and the RFC 6750 challenge
 * `WWW-Authenticate: Bearer`, with `error="invalid_token"` when the request did send a bearer token.
 */
function unauthorizedResponse(
  c: Context<AppEnv>,
  config: Config,
  message: string,
  details: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Response {
  const realm = config.publicBaseUrl;
  // A bearer token that was read and refused; not one sent beside a dead session cookie, which decides alone.
  const badToken = /^bearer\s/i.test(c.req.header('authorization') ?? '') && details.reason !== STALE_SESSION_COOKIE;
  const challenge = badToken ? `Bearer realm="${realm}", error="invalid_token"` : `Bearer realm="${realm}"`;
  const hints = { ...signInUrls(config), authorizationServer: `${realm}/.well-known/oauth-authorization-server/api/auth` };
  return c.json(failure('UNAUTHORIZED', message, { ...hints, ...details }), 401, { ...headers, 'WWW-Authenticate': challenge });
}
