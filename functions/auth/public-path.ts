import type { Config } from '../platform/config.ts';

/**
 * The request as the auth library must see it: on the public path. The library routes by the path of its `baseURL`
 * (`PUBLIC_BASE_URL` + `/api/auth`), and behind a path prefix, the edge's `.../functions/v1/api`, which the entry
 * removes before our routing, it was handed `/api/auth/sign-up/email` under a base of `/functions/v1/api/api/auth`
 * and found no endpoint: every `/api/auth/*` route, sign-in, OAuth and discovery included, answered an empty 404 on
 * the edge (review 58). Without a path in `PUBLIC_BASE_URL` (Node's usual case) the request is handed over as it is.
 */
export function onThePublicPath(config: Pick<Config, 'publicBaseUrl'>, request: Request): Request {
  const base = new URL(config.publicBaseUrl).pathname.replace(/\/+$/, '');
  if (!base) return request;
  const url = new URL(request.url);
  url.pathname = `${base}${url.pathname}`;
  return new Request(url, request);
}

/** The auth library's own base URL: where its routes are, publicly (its issuer, links and redirects follow it). */
export const libraryBaseUrl = (config: Pick<Config, 'publicBaseUrl'>): string => `${config.publicBaseUrl}/api/auth`;
