import type { Auth } from './better-auth.ts';
import { RATE_LIMITED_AUTH_PATHS } from './mount.ts';

/**
 * The `/api/auth/*` half of /openapi.json. The auth library describes its own endpoints
 * (auth.api.generateOpenAPISchema(), from its openAPI plugin); this takes that description and makes it ours:
 * - paths under /api/auth, operationIds prefixed `auth` (the library's `listUsers` is not our admin `listUsers`),
 *   component schemas prefixed `Auth` (its `User` is not ours), and our security schemes instead of its generic one;
 * - the OAuth token, introspection and revocation endpoints take form bodies (RFC 6749), as clients send them;
 * - endpoints that exist in the library but are inert here (social sign-in: no social provider is configured) are
 *   left out, and the metadata documents the library serves outside its endpoint list are added.
 * Tags are given here; http/openapi-groups.ts puts every tag, ours and these, in its audience's group.
 */

type Json = Record<string, any>;

/** Library endpoints that do nothing on this marketplace: no social providers, their error/landing pages, impersonation, an admin's password for a user. */
const INERT = new Set([
  '/sign-in/social',
  '/callback/{id}',
  '/link-social',
  '/unlink-account',
  '/refresh-token',
  '/get-access-token',
  '/account-info',
  '/delete-user/callback',
  '/ok',
  '/error',
  '/oauth2/public-client-prelogin',
  // Impersonation is granted to no role (rule 22: a session of the user would outlive the admin's demotion or ban),
  // so the library answers 403 to everyone; a documented operation nobody may call only misleads an integrator.
  '/admin/impersonate-user',
  '/admin/stop-impersonating',
  // Setting a user's password is granted to no role either (rule 22, review 22: the admin signed in as the user).
  '/admin/set-user-password',
]);

/**
 * Single methods of library endpoints left out: POST get-session answers 405 to everyone unless the session config's
 * deferSessionRefresh is on (it is not: GET get-session is the call), so a generated client offered a call that could
 * never succeed (review 77).
 */
const INERT_METHODS = new Set(['post /get-session']);

/** What the user's browser (the front end) calls in the OAuth flow, as opposed to what agent backends call. */
const CONSENT = new Set([
  '/oauth2/consent',
  '/oauth2/continue',
  '/oauth2/public-client',
  '/oauth2/get-consent',
  '/oauth2/get-consents',
  '/oauth2/update-consent',
  '/oauth2/delete-consent',
  '/oauth2/end-session',
  '/oauth2/end-session/confirm',
]);

/** Sent without any credential (sign-up, sign-in, password reset, public OAuth documents). */
const PUBLIC = new Set([
  '/sign-up/email',
  '/sign-in/email',
  '/request-password-reset',
  '/reset-password',
  '/reset-password/{token}',
  '/verify-email',
  '/send-verification-email',
  '/jwks',
]);

/** Called by the agent's backend with its client credentials (HTTP Basic, or client_id + client_secret in the form). */
const CLIENT_AUTHENTICATED = new Set(['/oauth2/token', '/oauth2/introspect', '/oauth2/revoke']);

export const AUTH_TAGS = {
  account: 'Sign-in and account',
  organizations: 'Organizations',
  consent: 'OAuth consent',
  oauth: 'OAuth 2.1 and OIDC',
  users: 'Users (auth library)',
} as const;

function tagOf(path: string, libraryTag: string | undefined): string {
  if (CONSENT.has(path)) return AUTH_TAGS.consent;
  if (path.startsWith('/oauth2/') || path === '/jwks') return AUTH_TAGS.oauth;
  if (path.startsWith('/admin/')) return AUTH_TAGS.users;
  if (path.startsWith('/organization/') || libraryTag === 'Organization') return AUTH_TAGS.organizations;
  return AUTH_TAGS.account;
}

function securityOf(path: string): Array<Record<string, string[]>> {
  if (PUBLIC.has(path)) return [];
  if (CLIENT_AUTHENTICATED.has(path)) return [{ oauthClient: [] }, {}];
  if (path.startsWith('/oauth2/userinfo')) return [{ bearer: [] }];
  if (path === '/oauth2/authorize') return [{ cookieSession: [] }, {}];
  return [{ cookieSession: [] }];
}

const capitalise = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

/** `authSignInEmail`; for an operation the library leaves unnamed, from its method and path (`authPostOrganizationCreate`). */
function operationIdOf(method: string, path: string, libraryId: string | undefined): string {
  if (libraryId) return `auth${capitalise(libraryId)}`;
  const words = `${method} ${path}`.split(/[^A-Za-z0-9]+/).filter(Boolean);
  return `auth${words.map(capitalise).join('')}`;
}

/** The library's component names, prefixed: every `$ref` to `#/components/schemas/X` becomes `.../AuthX`. */
function prefixRefs<T>(value: T): T {
  return JSON.parse(JSON.stringify(value).replaceAll('"#/components/schemas/', '"#/components/schemas/Auth')) as T;
}

/**
 * RFC 6749 clients post forms, and the library takes nothing else there (a JSON body is 415): the form alone is
 * documented. (Both were, and a client generated from the document sent JSON: review 51.)
 */
function formBody(requestBody: Json | undefined): Json | undefined {
  const schema = requestBody?.content?.['application/json']?.schema;
  if (!schema) return requestBody;
  return { ...requestBody, content: { 'application/x-www-form-urlencoded': { schema } } };
}

const RETRY_AFTER = { 'Retry-After': { description: 'Seconds until the allowance has room again', schema: { type: 'string' } } };

/**
 * The 429 of an endpoint our limiter answers before the library (mount.ts): the envelope's RATE_LIMITED, not the
 * library's `{ message }` (review 86).
 */
const ENVELOPE_RATE_LIMITED = {
  description: 'RATE_LIMITED: too many requests from this client address (or failed sign-ins of this account); retry after `Retry-After` seconds',
  headers: RETRY_AFTER,
  content: { 'application/json': { schema: { $ref: '#/components/schemas/RateLimitedError' } } },
};
const ENVELOPE_LIMITED_PATHS = new Set(RATE_LIMITED_AUTH_PATHS.map(([path]) => path.slice('/api/auth'.length)));

/** RFC 6749 §5.2's error answer, which the token-family endpoints give (not the library's `{ code, message }`). */
const OAUTH_ERROR_CONTENT = {
  'application/json': {
    schema: {
      type: 'object',
      properties: {
        error: { type: 'string', description: 'invalid_client, invalid_grant, invalid_request, invalid_scope, unsupported_grant_type, ...' },
        error_description: { type: 'string' },
      },
      required: ['error'],
    },
  },
};

/**
 * The token, introspection and revocation endpoints as served (review 51): their 400 and 401 are RFC 6749 errors;
 * only Bearer tokens are issued (no DPoP: functions/auth/oauth/no-dpop.ts), and no client_credentials grant.
 */
function oauthClientEndpoint(op: Json): Json {
  const responses: Json = { ...op.responses };
  // the token endpoint's allowances (refreshes per grant, code exchanges): an RFC 6749 error too, not the library's
  // `{ message }` (review 86: a client generated from the document could not read `error`)
  if (responses['429']) responses['429'] = { description: 'Too many requests: retry after `Retry-After` seconds', headers: RETRY_AFTER, content: OAUTH_ERROR_CONTENT };
  for (const status of ['400', '401'] as const) {
    if (!responses[status]) continue;
    responses[status] = {
      description:
        status === '401'
          ? 'invalid_client: the client did not authenticate (RFC 6749 §5.2)'
          : 'An RFC 6749 error (invalid_grant, invalid_request, ...); a request holding a NUL character gets the envelope\'s VALIDATION_ERROR instead',
      content: OAUTH_ERROR_CONTENT,
    };
  }
  const parameters = (op.parameters as Json[] | undefined)?.filter((p) => String(p.name).toLowerCase() !== 'dpop');
  const answer = structuredClone(responses['200']);
  const properties = answer?.content?.['application/json']?.schema?.properties;
  if (properties?.token_type) properties.token_type = { ...properties.token_type, enum: ['Bearer'] };
  const form = structuredClone(op.requestBody);
  const fields = form?.content?.['application/x-www-form-urlencoded']?.schema?.properties;
  if (fields?.scope) fields.scope = { ...fields.scope, description: 'A refresh may ask for fewer of the grant\'s scopes (space-separated)' };
  return {
    ...op,
    ...(parameters ? { parameters } : {}),
    ...(form ? { requestBody: form } : {}),
    responses: { ...responses, ...(answer ? { 200: answer } : {}) },
  };
}

const AUTHORIZE_NOTE =
  ' A browser navigation gets `302 Found` to the sign-in page, the consent page or the redirect URI. A `fetch`/XHR caller ' +
  '(`Sec-Fetch-Mode: cors`, which Node\'s fetch also sends) gets `200 {"redirect": true, "url": "..."}` instead: follow `url`.';

const metadataOperation = (operationId: string, summary: string) => ({
  operationId,
  tags: [AUTH_TAGS.oauth],
  summary,
  security: [],
  responses: { 200: { description: 'The metadata document', content: { 'application/json': { schema: { type: 'object' } } } } },
});

/** Paths served outside the library's endpoint list (protocol-gaps.ts and the library's well-known handlers). */
const METADATA_PATHS: Json = {
  '/.well-known/oauth-authorization-server/api/auth': {
    get: metadataOperation('authServerMetadata', 'OAuth 2.1 authorization server metadata (RFC 8414, path-suffixed location)'),
  },
  '/api/auth/.well-known/oauth-authorization-server': {
    get: metadataOperation('authServerMetadataUnderIssuer', 'OAuth 2.1 authorization server metadata under the issuer'),
  },
  '/api/auth/.well-known/openid-configuration': {
    get: metadataOperation('authOpenIdConfiguration', 'OpenID Connect discovery document'),
  },
};

const stringSchema = (description: string) => ({ type: 'string', description });
const queryParam = (name: string, description: string, required = false) => ({ name, in: 'query', required, schema: stringSchema(description) });

/** A 200 answer of one of the library's models (its component, prefixed), or of a list of them. */
const modelAnswer = (description: string, model: string, list = false) => {
  const ref = { $ref: `#/components/schemas/Auth${model}` };
  return { description, content: { 'application/json': { schema: list ? { type: 'array', items: ref } : ref } } };
};
/**
 * The 200 of an operation the library describes by its errors alone (the consent calls docs/oauth.md gives a front end:
 * a generated client had no type for their answers, review 32).
 */
const jsonAnswer = (description: string, schema: Json) => ({ description, content: { 'application/json': { schema } } });
const withAnswer = (answer: Json) => (op: Json) => ({ ...op, responses: { ...op.responses, 200: answer } });
/** The 409 of a unique value written by two requests at once, in the library's error shape (as its 400). */
const slugRace = (op: Json) => ({
  ...op,
  responses: {
    ...op.responses,
    409: {
      ...(op.responses as Json)?.['400'],
      description: 'CONFLICT: another request wrote the same slug at the same moment; choose another and retry',
    },
  },
});
/**
 * The 302 of authorize goes to the sign-in or consent page as well as to the client (the library says "Redirect to
 * client with code or error": review 84, a newcomer's script followed it and did not expect the consent page).
 */
const authorizeRedirect = (op: Json) => {
  const found = (op.responses as Json | undefined)?.[302] as Json | undefined;
  if (!found) return op;
  return {
    ...op,
    responses: {
      ...op.responses,
      302: { ...found, description: "Redirect to the sign-in page, the consent page (`consent_code`), or the client's redirect_uri with the code or an error" },
    },
  };
};
/** `{"redirect": true, "url"}`: what the library answers a `fetch` (Sec-Fetch-Mode: cors) where a browser gets a 302. */
const redirectSchema = {
  type: 'object',
  properties: { redirect: { type: 'boolean', const: true }, url: { type: 'string', format: 'uri' } },
  required: ['redirect', 'url'],
};
/** authorize, by GET or POST: a navigation gets the 302, a fetch the 200 of AUTHORIZE_NOTE (review 77: only the 302 was listed). */
const authorizeAnswers = (op: Json) =>
  authorizeRedirect(
    withAnswer(jsonAnswer('A `fetch`/XHR caller: where to send the browser (the sign-in, consent or error page, or the redirect URI)', redirectSchema))(op),
  );
/** An organization read that answers null when the user has no active organization and names none. */
const organizationOrNull = (description: string) => withAnswer(jsonAnswer(description, { anyOf: [{ $ref: '#/components/schemas/AuthOrganization' }, { type: 'null' }] }));
/** has-permission answers `{ error: null, success }` (the library documents `error` as a string). */
const permissionAnswer = withAnswer(jsonAnswer('Whether the caller has every permission asked about', {
  type: 'object',
  properties: { error: { type: ['string', 'null'] }, success: { type: 'boolean' } },
  required: ['success'],
}));

/**
 * Where the library's description is not what this service does (contract.md, OAuth 2.1 / OIDC), ours replaces it,
 * so that a client generated from /openapi.json calls these the way the contract says (found by review 11: the
 * consent was documented with the library's `oauth_query` body and a `{ redirect_uri }` answer, and a generated
 * client's consent was refused).
 */
const CORRECTIONS: Record<string, (op: Json) => Json> = {
  'post /oauth2/consent': (op) => {
    const schema = {
      type: 'object',
      properties: {
        accept: { type: 'boolean', description: 'true grants the scopes asked for; false sends error=access_denied to the redirect URI' },
        consent_code: stringSchema('The consent_code of the consent page URL (`/consent?consent_code=...`)'),
      },
      required: ['accept', 'consent_code'],
    };
    return {
      ...op,
      description:
        'Answers the consent page. A `fetch` (`Sec-Fetch-Mode: cors`) gets `200 {"redirect": true, "url"}`: go to `url` ' +
        "(the client's redirect URI with a code, or with error=access_denied). A browser form post gets `302 Found` there.",
      requestBody: { required: true, content: { 'application/json': { schema }, 'application/x-www-form-urlencoded': { schema } } },
      responses: {
        ...op.responses,
        200: jsonAnswer('Where to send the browser', redirectSchema),
        302: { description: "A browser form post: Location is the client's redirect URI with a code or an error" },
      },
    };
  },
  'get /oauth2/public-client': (op) => ({
    ...op,
    description: "What the consent page shows of an agent's OAuth client; for a signed-in user",
    parameters: [queryParam('client_id', 'The client_id of the authorize request', true)],
    responses: {
      ...op.responses,
      200: {
        description: "The client's public fields",
        content: {
          'application/json': {
            schema: {
              type: 'object',
              properties: {
                client_id: { type: 'string' },
                client_name: { type: 'string' },
                client_uri: { type: 'string' },
                logo_uri: { type: 'string' },
                redirect_uris: { type: 'array', items: { type: 'string' } },
              },
              required: ['client_id'],
            },
          },
        },
      },
    },
  }),
  'get /oauth2/end-session': (op) => ({
    ...op,
    parameters: [
      queryParam('id_token_hint', 'An ID token the client was issued for the user (OIDC RP-Initiated Logout)'),
      queryParam('post_logout_redirect_uri', "One of the client's registered post-logout redirect URIs, matched exactly"),
      queryParam('state', 'Returned unchanged on the post-logout redirect'),
      queryParam('client_id', 'The client, when no id_token_hint names it'),
    ],
  }),
  'get /oauth2/authorize': authorizeAnswers,
  'post /oauth2/authorize': authorizeAnswers,
  // the link of the reset mail: a redirect to the callbackURL, with ?token=... or with ?error=INVALID_TOKEN
  'get /reset-password/{token}': (op) => ({
    ...op,
    responses: { ...op.responses, 302: { description: 'Location: the callbackURL with `token` (a live link) or `error=INVALID_TOKEN`' } },
  }),
  // the link of the verification mail: a redirect to the callbackURL, verified, or asking to sign in first (review 101:
  // the one answer every user gets was not listed)
  'get /verify-email': (op) => ({
    ...op,
    responses: {
      ...op.responses,
      302: {
        description:
          'Location: the callbackURL, with `verified=true` once the address is verified in its own session; signed out (or as ' +
          'another account), with `error=SIGN_IN_TO_VERIFY` and `verify` (the link to open again once signed in) and nothing verified',
      },
    },
  }),
  // two requests writing one slug at once: the later insert fails, answered 409 CONFLICT (better-auth.ts onAPIError)
  'post /organization/create': slugRace,
  'post /organization/update': slugRace,
  'get /organization/get-full-organization': organizationOrNull('The organization with its members and invitations; null with no active organization and none named'),
  'get /organization/get-organization': organizationOrNull('The organization; null with no active organization and none named'),
  'post /organization/has-permission': permissionAnswer,
  'post /admin/has-permission': permissionAnswer,
  'post /organization/delete': withAnswer(modelAnswer('The organization, now deleted', 'Organization')),
  'get /oauth2/get-consents': withAnswer(modelAnswer("The signed-in user's consents, one per client", 'OauthConsent', true)),
  'get /oauth2/get-consent': withAnswer(modelAnswer('The consent (of the signed-in user)', 'OauthConsent')),
  'post /oauth2/update-consent': withAnswer(modelAnswer('The consent with its new scopes', 'OauthConsent')),
  'post /oauth2/delete-consent': withAnswer({ description: 'Withdrawn (an empty body)' }),
  // The organization calls the library describes by their errors alone (their answers as the plugin returns them).
  'post /organization/cancel-invitation': withAnswer(modelAnswer('The invitation, now canceled', 'Invitation')),
  'get /organization/list-invitations': withAnswer(modelAnswer("The organization's invitations", 'Invitation', true)),
  'post /organization/leave': withAnswer(modelAnswer('The membership that ended', 'Member')),
  'get /organization/list-members': withAnswer(jsonAnswer('A page of the members, and how many there are', {
    type: 'object',
    properties: { members: { type: 'array', items: { $ref: '#/components/schemas/AuthMember' } }, total: { type: 'integer' } },
    required: ['members', 'total'],
  })),
  'get /organization/get-active-member-role': withAnswer(jsonAnswer("The member's role (roles joined by commas)", {
    type: 'object',
    properties: { role: { type: 'string' } },
    required: ['role'],
  })),
  'post /organization/check-slug': withAnswer(jsonAnswer('The slug is free (a taken one is 400 SLUG_IS_TAKEN)', {
    type: 'object',
    properties: { status: { type: 'boolean', const: true } },
    required: ['status'],
  })),
  'post /oauth2/end-session/confirm': (op) => ({
    ...op,
    responses: {
      ...op.responses,
      200: {
        description:
          'Signed out. A `fetch` gets `{"redirect": true, "url"}` when a registered post_logout_redirect_uri was asked for ' +
          '(an empty body otherwise); a browser form post gets the signed-out page',
        content: {
          'application/json': {
            schema: { type: 'object', properties: { redirect: { type: 'boolean', const: true }, url: { type: 'string', format: 'uri' } } },
          },
          'text/html': { schema: { type: 'string' } },
        },
      },
      302: { description: 'A browser form post with a registered post_logout_redirect_uri: Location is that URI' },
    },
  }),
  // RFC 7662: `aud` is a string or an array of strings; this service answers the array (the agent's resource URL and
  // the userinfo URL).
  'post /oauth2/token': oauthClientEndpoint,
  'post /oauth2/revoke': (op) => {
    const corrected = oauthClientEndpoint(op);
    return { ...corrected, responses: { ...corrected.responses, 200: { description: 'Revoked, or not a token of this client (RFC 7009): an empty body' } } };
  },
  'post /oauth2/introspect': (plain) => {
    const op = oauthClientEndpoint(plain);
    const answer = structuredClone(op.responses?.[200]);
    const properties = answer?.content?.['application/json']?.schema?.properties;
    if (properties?.aud) {
      properties.aud = { description: properties.aud.description, oneOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }] };
    }
    return answer ? { ...op, responses: { ...op.responses, 200: answer } } : op;
  },
};

/**
 * The library's models (User, Session, Organization, ...) as their rows come back: a field the model does not require
 * is a nullable column, answered as null when unset (a user's `image`, `banReason`, `banExpires`, a session's
 * `activeOrganizationId`, an organization's `logo`), where the library's description said a plain string, so a client
 * generated from the document and checking answers refused them (found by review 11).
 */
function nullableOptionals(schema: Json): Json {
  if (!schema?.properties) return schema;
  const required = new Set<string>(schema.required ?? []);
  const properties: Json = {};
  for (const [key, property] of Object.entries<Json>(schema.properties)) {
    properties[key] = required.has(key) || typeof property.type !== 'string' ? property : { ...property, type: [property.type, 'null'] };
  }
  return { ...schema, properties };
}

/**
 * Models whose fields come back otherwise than the library describes them: an organization's `metadata` is stored as
 * JSON text and answered parsed, an object, by create and update (review 77: documented as a string).
 */
const MODEL_CORRECTIONS: Record<string, (schema: Json) => Json> = {
  Organization: (schema) =>
    schema.properties?.metadata
      ? { ...schema, properties: { ...schema.properties, metadata: { ...schema.properties.metadata, type: ['object', 'string', 'null'] } } }
      : schema,
};

export interface AuthOpenApi {
  paths: Json;
  schemas: Json;
}

/** The auth library's operations, ready to merge into the app's document. */
export async function authOpenApi(auth: Auth): Promise<AuthOpenApi> {
  const library = (await (auth.api as unknown as { generateOpenAPISchema(): Promise<Json> }).generateOpenAPISchema()) as Json;
  const paths: Json = { ...METADATA_PATHS };
  for (const [path, item] of Object.entries<Json>(library.paths ?? {})) {
    if (INERT.has(path)) continue;
    const out: Json = {};
    for (const [method, operation] of Object.entries<Json>(item)) {
      if (INERT_METHODS.has(`${method} ${path}`)) continue;
      const op = prefixRefs(operation);
      const body = CLIENT_AUTHENTICATED.has(path) ? formBody(op.requestBody) : op.requestBody;
      const description = path === '/oauth2/authorize' ? `${op.description ?? ''}.${AUTHORIZE_NOTE}` : op.description;
      const ours = {
        ...op,
        operationId: operationIdOf(method, path, op.operationId),
        tags: [tagOf(path, op.tags?.find((t: string) => t !== 'Default'))],
        description,
        security: securityOf(path),
        ...(body ? { requestBody: body } : {}),
      };
      const corrected: Json = CORRECTIONS[`${method} ${path}`]?.(ours) ?? ours;
      out[method] =
        method === 'post' && ENVELOPE_LIMITED_PATHS.has(path) ? { ...corrected, responses: { ...corrected.responses, 429: ENVELOPE_RATE_LIMITED } } : corrected;
    }
    paths[`/api/auth${path}`] = out;
  }
  const schemas: Json = {};
  for (const [name, schema] of Object.entries<Json>(library.components?.schemas ?? {})) {
    const model = nullableOptionals(prefixRefs(schema));
    schemas[`Auth${name}`] = MODEL_CORRECTIONS[name]?.(model) ?? model;
  }
  return { paths, schemas };
}
