import { OpenAPIHono, z, type RouteConfig } from '@hono/zod-openapi';
import type { Context } from 'hono';
import { requireBearerCaller, requireUser } from './access.ts';
import type { AppEnv } from '../platform/app-types.ts';
import { errorBodySchema } from './envelope.ts';
import { ApiError } from './errors.ts';
import { breaksLine } from '../platform/text.ts';

/**
 * Every domain builds its routes on `newRouter()`, so a failed zod parse anywhere becomes the same
 * 400 VALIDATION_ERROR with `details.issues` listing field paths and messages.
 *
 * On a route that needs a signed-in caller (its OpenAPI `security` names one), the caller is authenticated before a
 * validation failure is answered: an anonymous, expired or revoked caller gets 401 whatever it sent, as the contract's
 * error table says, and learns nothing of the route's input from its 400 (reviews 94 and 52: a malformed body without
 * credentials answered 400 with the schema's issues). A bearer-only route refuses a cookie session (403) before its input
 * as well. The route's own code still decides who may do what (403).
 */
export function newRouter() {
  const router = new OpenAPIHono<AppEnv>({
    defaultHook: (result) => {
      if (!result.success) throw validationError(result.error, result.target);
    },
  });
  const openapi = router.openapi.bind(router);
  router.openapi = ((route: RouteConfig, handler: never, hook?: never) =>
    openapi(route as never, handler, hook ?? (callerFirst(route) as never))) as typeof router.openapi;
  return router;
}

function callerFirst(route: RouteConfig) {
  // The routes that name SECURITY's schemes take a user's credential (the internal routes name a `bearer` of their own,
  // for their DRAIN_TOKEN, which their own middleware judges). A bearer-only route also refuses a cookie session (403)
  // here: the kind of credential it takes is part of who may call it.
  const judgeCaller =
    route.security === SECURITY.bearerOnly ? requireBearerCaller : route.security === SECURITY.sessionOrBearer ? requireUser : undefined;
  return async (result: { success: boolean; error?: z.ZodError; target?: string }, c: Context<AppEnv>) => {
    if (result.success) return;
    await judgeCaller?.(c);
    throw validationError(result.error!, result.target);
  };
}

export function validationError(error: z.ZodError, target?: string): ApiError {
  return new ApiError('VALIDATION_ERROR', 'The request is not valid', {
    issues: error.issues.map((i) => ({
      path: [...(target && target !== 'json' ? [target] : []), ...i.path.map(String)].join('.'),
      message: i.message,
    })),
  });
}

/**
 * A JSON request body. Marked required so that a request with no body is validated as `{}` and fails on
 * missing fields, instead of reaching the handler unvalidated.
 */
export function jsonBody<T extends z.ZodType>(schema: T, description?: string) {
  return {
    required: true,
    ...(description ? { description } : {}),
    content: { 'application/json': { schema } },
  } as const;
}

export function jsonResponse<T extends z.ZodType>(schema: T, description: string) {
  return { description, content: { 'application/json': { schema } } } as const;
}

const errorResponse = (description: string) => ({ description, content: { 'application/json': { schema: errorBodySchema } } });

export const rateLimitedSchema = z
  .object({
    status: z.literal('error'),
    data: z.null(),
    error: z.object({ code: z.literal('RATE_LIMITED'), message: z.string(), details: z.record(z.string(), z.unknown()) }),
  })
  .openapi('RateLimitedError');

/** The rate-limit 429 (the usage routes' 429 is QUOTA_EXCEEDED, a schema of its own: metering/routes/responses.ts). */
const rateLimited = {
  description:
    "RATE_LIMITED: too many requests from this client (per address and endpoint, failed sign-ins per account, or a daily allowance per user or per address: docs/errors.md lists them); retry after `Retry-After` seconds",
  headers: { 'Retry-After': { description: 'Seconds until the window ends', schema: { type: 'string' as const } } },
  content: { 'application/json': { schema: rateLimitedSchema } },
};

// 415 is not among them: openapi-document.ts derives it for every operation that takes a JSON body.
type ErrorStatusCode = 400 | 401 | 402 | 403 | 404 | 409 | 413 | 422 | 429 | 501 | 503;

/**
 * Statuses the service answers on a route by a rule of its HTTP layer rather than by the route's own code: ONE
 * definition per rule, named in `errors(...)` (e.g. `errors(400, 404, 'agentPath')`) by the routes it holds for, so
 * that /openapi.json and the generated client list them. Named at least wherever it adds a status the route's own
 * list lacks; tests/foundation/openapi-statuses.test.ts sends each rule's request to every operation and fails on a
 * status the operation does not list. Two statuses need no naming, as they follow from the request's shape: 415 where
 * a route takes a JSON body, 400 where it has path or query parameters (added to every operation by
 * openapi-document.ts).
 */
const RULES = {
  /**
   * The path names an agent (an id, or a published agent's slug): app.ts mounts agentBoundary (access.ts) on it, which
   * verifies any bearer token sent before the route runs, public reads included.
   */
  agentPath: {
    401: 'an invalid, expired or revoked bearer token (checked on every path that names an agent, even where none is needed)',
    403: "an agent's access token on a path that names another agent (a token acts only within its own agent)",
  },
  /** A write that reads the caller's session cookie: the authenticator refuses it from an untrusted `Origin` (CSRF). */
  cookieWrite: {
    403: 'a cookie-authenticated write from an untrusted `Origin`',
  },
  /**
   * A read that needs the caller: the authenticator refuses one with the session cookie that another site's page made
   * the browser send (fetch metadata; security rule 29, review 24).
   */
  cookieRead: {
    403: 'a read with the session cookie that another site\'s page sent (an image, a frame, a fetch from an untrusted origin, a navigation from elsewhere): `details.reason: "cross_site"`',
  },
  /**
   * A route whose agent is not in its path (a checkout by tier, a checkout session, the billing portal): an agent's
   * bearer token acts only within its own agent (requireWithinAgent, access.ts).
   */
  withinAgent: {
    403: "an agent's access token acting outside its own agent (another agent's tier, checkout session or subscription)",
  },
  /**
   * UNAVAILABLE: the database unreachable or too slow, a transaction ended by PostgreSQL to break a deadlock or a
   * serialization conflict, and (usage writes) a counter held by another change: always with `Retry-After`, and safe
   * to retry (docs/errors.md).
   */
  unavailable: {
    503:
      'UNAVAILABLE: the database is unreachable or too slow, a concurrent change ended the transaction (`details.reason: ' +
      '"concurrent_change"`) or, for a usage write, its counter is held by another change (`details.reason: "counter_locked"`); ' +
      'nothing was kept: retry after `Retry-After` seconds (a write with the same clientReqId)',
  },
} satisfies Record<string, Partial<Record<ErrorStatusCode, string>>>;

export type ErrorRule = keyof typeof RULES;

const retryAfter = { 'Retry-After': { description: 'Seconds to wait before retrying', schema: { type: 'string' as const } } };

/**
 * The error responses a route can give, for the OpenAPI document: statuses it answers by its own code, and the rules
 * (RULES above) that hold for it. A status given by both, or by several rules, is listed once with every reason.
 */
export function errors(...items: Array<ErrorStatusCode | ErrorRule>) {
  const text: Record<number, string> = {
    400: 'Validation error or invalid cursor',
    401: 'Not signed in, or credentials invalid/expired/revoked',
    402: 'No active subscription to the agent',
    403: 'Signed in without the required role or ownership',
    404: 'Resource not found',
    409: 'Conflicts with an existing resource',
    413: 'Body over 1 MiB',
    422: 'Not allowed in the current state',
    501: 'Not implemented',
    503: 'Feature not configured or dependency unavailable',
  };
  const reasons = new Map<number, string[]>();
  const add = (status: number, reason: string) => reasons.set(status, [...(reasons.get(status) ?? []), reason]);
  for (const item of items) {
    if (typeof item === 'number') add(item, text[item] ?? '');
    else for (const [status, reason] of Object.entries(RULES[item])) add(Number(status), reason);
  }
  const out: Record<number, ReturnType<typeof errorResponse> | typeof rateLimited | (ReturnType<typeof errorResponse> & { headers: typeof retryAfter })> = {};
  for (const [s, texts] of reasons) {
    if (s === 429) {
      out[s] = rateLimited;
      continue;
    }
    const description = texts.join('; or ');
    const response = errorResponse(description.charAt(0).toUpperCase() + description.slice(1));
    out[s] = s === 503 && items.includes('unavailable') ? { ...response, headers: retryAfter } : response;
  }
  return out as RouteConfig['responses'];
}

/**
 * A uuid path parameter (a malformed id is a 400, never a database error), in lower case: PostgreSQL compares uuids
 * in either case, but an id used as text must be the database's own spelling (a webhook secret is sealed to its
 * endpoint's id; sealed to an upper-case path id, no delivery could open it).
 */
/**
 * A name the catalog shows on one line and puts into mails (an agent's, a tag's, a tier's, a metric's): trimmed, 1 to
 * `max` characters, refused when it holds a line break, a control character or a bidirectional override
 * (platform/text.ts). An agent name with line breaks wrote a forged "(verified)" request line into the staff's
 * demo-request mail (review 72), as user and organization names did before them (reviews 19, 63, 66).
 */
export const oneLineName = (max: number) =>
  z
    .string()
    .trim()
    .min(1)
    .max(max)
    .refine((v) => !breaksLine(v), 'must be one line: no line breaks, control characters or bidirectional overrides');

export const uuidParam = (name: string) =>
  z
    .uuid({ message: `${name} must be a UUID` })
    .overwrite((id) => id.toLowerCase())
    .openapi({ param: { name, in: 'path' }, example: '0b8f3c1e-8a4e-4c55-9f27-3d1f0a6f2b10' });

/**
 * OpenAPI `security` of a route, one definition each (the schemes are registered in app.ts): most routes take the
 * session cookie or a bearer token; usage writes and reservations take only the path agent's bearer token.
 */
export const SECURITY: { sessionOrBearer: Array<Record<string, string[]>>; bearerOnly: Array<Record<string, string[]>> } = {
  sessionOrBearer: [{ cookieSession: [] }, { bearer: [] }],
  bearerOnly: [{ bearer: [] }],
};
