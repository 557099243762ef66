import { AUTH_TAGS, authOpenApi, type Auth } from './auth/index.ts';

/**
 * GET /openapi.json: the app's routes (described by their zod schemas) and the auth library's `/api/auth/*`
 * operations (auth/openapi.ts) in one document, grouped by who calls them, so an integrator finds their half:
 * every tag is named `<group> · <tag>` (visible in any renderer, Swagger UI included) and listed under its group in
 * `x-tagGroups` (the extension Redoc and Scalar render as sections). A tag missing from GROUPS fails the docs test.
 */

type Json = Record<string, any>;

export const GROUPS: Record<string, readonly string[]> = {
  'Agent backends': ['Usage', AUTH_TAGS.oauth],
  'Front end': [
    AUTH_TAGS.account,
    AUTH_TAGS.consent,
    'Identity',
    'Catalog',
    'Catalog content',
    'Tags',
    'Reviews',
    'Engagement',
    'Pricing',
    'Subscriptions',
    AUTH_TAGS.organizations,
  ],
  Admin: [
    'Administration',
    'Pricing tiers',
    'Metrics and quotas',
    'Subscriptions (admin)',
    'OAuth clients',
    'Agent webhooks',
    AUTH_TAGS.users,
  ],
  Operations: ['Health', 'Health and docs', 'Internal', 'Webhook'],
};

const groupOf = new Map(Object.entries(GROUPS).flatMap(([group, tags]) => tags.map((tag) => [tag, group] as const)));

/** `Agent backends · Usage`; a tag in no group keeps its name (the docs test lists it). */
export function groupedTag(tag: string): string {
  const group = groupOf.get(tag);
  return group ? `${group} · ${tag}` : tag;
}

const METHODS = new Set(['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace']);

const errorContent = (schema: Json) => ({ 'application/json': { schema } });
/** The error shapes (docs/errors.md): our envelope (http/envelope.ts) and the auth library's `{ code, message }`. */
const ENVELOPE_ERROR = errorContent({ $ref: '#/components/schemas/Error' });
const LIBRARY_ERROR = errorContent({ type: 'object', properties: { code: { type: 'string' }, message: { type: 'string' } } });

/**
 * Statuses an operation answers by the shape of its request, whatever its route lists: 415 UNSUPPORTED_MEDIA_TYPE to
 * a body sent as another type where it takes JSON (the route's validator, http/text-guard.ts, the auth library), and
 * 400 VALIDATION_ERROR to a malformed path or query value (an id that is not a UUID). Derived here from every
 * operation, ours and the auth library's, so that no route can forget them (docs/errors.md: every operation lists
 * its error statuses); a route that lists one itself keeps its own description.
 */
function addRequestStatuses(op: Json, content: Json): void {
  const responses: Json = (op.responses ??= {});
  if (op.requestBody?.content?.['application/json']) {
    responses['415'] ??= { description: 'UNSUPPORTED_MEDIA_TYPE: the body was not sent as `application/json`', content };
  } else if (op.requestBody?.content?.['application/x-www-form-urlencoded']) {
    responses['415'] ??= { description: 'UNSUPPORTED_MEDIA_TYPE: the body was not sent as `application/x-www-form-urlencoded`', content };
  }
  if (op.parameters?.some((p: Json) => p.in === 'path' || p.in === 'query')) {
    responses['400'] ??= { description: 'VALIDATION_ERROR: a path or query value is malformed (e.g. an id that is not a UUID)', content };
  }
}

/**
 * Our routes validate a request without a body as `{}` (http/router.ts `jsonBody`), so a body whose fields are all
 * optional may be left out: the document says so, and typed clients need not send `{}` (review 56 found requestDemo
 * and createEnterpriseInquiry documented with a required body they never needed).
 */
function markOmittableBody(op: Json, schemas: Json): void {
  let schema = op.requestBody?.content?.['application/json']?.schema;
  if (typeof schema?.$ref === 'string') schema = schemas[schema.$ref.replace('#/components/schemas/', '')];
  if (op.requestBody?.required && schema?.type === 'object' && !(schema.required?.length > 0)) op.requestBody.required = false;
}

/** The served document: the app's, with the auth library's operations merged in and every tag grouped. */
export async function openApiDocument(appDocument: Json, auth: Auth): Promise<Json> {
  const library = await authOpenApi(auth);
  const doc: Json = {
    ...appDocument,
    paths: { ...appDocument.paths, ...library.paths },
    components: {
      ...appDocument.components,
      schemas: { ...appDocument.components?.schemas, ...library.schemas },
      securitySchemes: {
        ...appDocument.components?.securitySchemes,
        oauthClient: {
          type: 'http',
          scheme: 'basic',
          description: "The agent's OAuth client: client_id and client_secret (or both as form fields, client_secret_post)",
        },
      },
    },
  };
  const used = new Set<string>();
  for (const [path, item] of Object.entries<Json>(doc.paths)) {
    for (const [method, op] of Object.entries<Json>(item)) {
      if (!METHODS.has(method)) continue;
      addRequestStatuses(op, path in library.paths ? LIBRARY_ERROR : ENVELOPE_ERROR);
      if (!(path in library.paths)) markOmittableBody(op, doc.components.schemas);
      if (!Array.isArray(op.tags)) continue;
      op.tags = op.tags.map(groupedTag);
      for (const tag of op.tags) used.add(tag);
    }
  }
  const ordered = Object.entries(GROUPS).flatMap(([, tags]) => tags.map(groupedTag).filter((t) => used.has(t)));
  const ungrouped = [...used].filter((t) => !ordered.includes(t)).sort();
  doc.tags = [...ordered, ...ungrouped].map((name) => ({ name }));
  doc['x-tagGroups'] = Object.entries(GROUPS).map(([name, tags]) => ({ name, tags: tags.map(groupedTag).filter((t) => used.has(t)) }));
  return doc;
}
