/**
 * Endpoints of the auth library that nobody may call (contract.md, Trust boundaries): OAuth clients exist only as
 * agents' clients, created by createAgent (functions/auth/agent-clients.ts) and managed by platform admins through
 * /admin/agents/{agentId}/oauth-client (admin-routes.ts). So every client and resource management endpoint of
 * @better-auth/oauth-provider is refused here, before the library sees the request, for every caller and method:
 * 401 UNAUTHORIZED when signed out, 403 FORBIDDEN when signed in (platform admins included). The jwt plugin's
 * session JWT endpoint is refused too: its tokens would carry the issuer and audience of access tokens.
 *
 * Second layer: provider-options.ts answers false from the library's own privilege hooks (clientPrivileges,
 * resourcePrivileges), so a client or resource endpoint added by a library upgrade is refused even before it is
 * listed here; tests/oauth/client-registry.test.ts fails when the library's endpoint table has a client, resource
 * or registration path that is neither below nor one of PUBLIC_CLIENT_ENDPOINTS.
 *
 * Paths are relative to the library's base path /api/auth and matched after normalising the request path
 * (percent-decoded, lower case, repeated and trailing slashes dropped), so no spelling reaches the library.
 *
 * This module is the list and its matcher only (better-auth.ts reads the list too); the router that refuses them is
 * closed-endpoint-routes.ts.
 */

export interface ClosedEndpoint {
  /** The library's path (relative to /api/auth); `:name` segments match any one segment. */
  path: string;
  /** Also every path below it (the resource endpoints: an identifier is a URL, which may hold slashes). */
  subtree?: boolean;
  /** What the library does there (documentation; every method of the path is refused). */
  does: string;
}

export const CLOSED_ENDPOINTS: readonly ClosedEndpoint[] = [
  // Dynamic registration (RFC 7591): 401 for everyone, as the contract says (also answered in protocol-gaps.ts).
  { path: '/oauth2/register', does: 'dynamic client registration' },
  { path: '/oauth2/create-client', does: 'create a client (any signed-in user, by default)' },
  { path: '/admin/oauth2/create-client', does: 'create a client (server-only)' },
  { path: '/oauth2/get-client', does: 'read a client' },
  { path: '/oauth2/get-clients', does: 'list clients' },
  { path: '/oauth2/update-client', does: 'update a client' },
  { path: '/admin/oauth2/update-client', does: 'update a client (server-only)' },
  { path: '/oauth2/client/rotate-secret', does: "rotate a client's secret" },
  { path: '/oauth2/delete-client', does: 'delete a client' },
  { path: '/admin/oauth2/resources', subtree: true, does: 'create / list protected resources (server-only)' },
  { path: '/admin/oauth2/resources/:identifier', does: 'read / update / delete a resource (server-only)' },
  { path: '/admin/oauth2/resources/:identifier/clients/:client_id', does: 'link / unlink a client and a resource (server-only)' },
  { path: '/token', does: 'jwt plugin: a session JWT signed with our keys, issuer and audience of access tokens' },
];

/**
 * Client endpoints that stay open: the public fields of a client (name, uri, icon, ...) that the consent page shows.
 * `public-client-prelogin` is off unless allowPublicClientPrelogin is set (it is not): the library answers 400.
 */
export const PUBLIC_CLIENT_ENDPOINTS: readonly string[] = ['/oauth2/public-client', '/oauth2/public-client-prelogin'];

const BASE_PATH = '/api/auth';
const BASE = normalise(BASE_PATH);
const matchers = CLOSED_ENDPOINTS.map((endpoint) => ({ endpoint, segments: normalise(endpoint.path) }));

/** The closed endpoint a request path (the whole path, /api/auth included) names, if any. */
export function closedEndpointOf(requestPath: string): ClosedEndpoint | undefined {
  const segments = normalise(requestPath);
  if (!BASE.every((s, i) => segments[i] === s)) return undefined;
  const rest = segments.slice(BASE.length);
  return matchers.find(
    ({ endpoint, segments: pattern }) =>
      (endpoint.subtree ? rest.length >= pattern.length : rest.length === pattern.length) &&
      pattern.every((s, i) => s.startsWith(':') || s === rest[i]),
  )?.endpoint;
}

/** Path segments, percent-decoded (repeatedly), lower case, without empty ones (repeated or trailing slashes). */
function normalise(path: string): string[] {
  let decoded = path;
  for (let i = 0; i < 3; i++) {
    try {
      const next = decodeURIComponent(decoded);
      if (next === decoded) break;
      decoded = next;
    } catch {
      break;
    }
  }
  return decoded
    .toLowerCase()
    .split(/[/\\]+/)
    .filter((s) => s !== '' && s !== '.');
}
