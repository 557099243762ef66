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
  for (const item of Object.values<Json>(doc.paths)) {
    for (const [method, op] of Object.entries<Json>(item)) {
      if (!METHODS.has(method) || !Array.isArray(op.tags)) continue;
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
