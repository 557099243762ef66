import { CROSS_SITE_REQUEST } from '../http/context.ts';
import { ApiError } from '../http/errors.ts';

/**
 * Whether a browser request was made by the user rather than by a page of another site riding on their cookie, read
 * from the fetch metadata browsers send (Sec-Fetch-Site, -Mode, -Dest): a request of the marketplace's own origin or
 * site, one the user typed or bookmarked (`none`), a CORS fetch from a trusted origin (a front end on FRONTEND_URL),
 * and, where a page is meant to be navigated to from elsewhere (`crossSiteNavigation`: the authorize and end-session
 * endpoints, the /admin page), a top-level navigation (a link followed, a redirect: the user sees where they land). A JSON API is
 * not navigated to from other sites: there a page of another site could navigate a popup it opened again and again
 * without a click (found by a review of the admin reads), so a cross-site navigation is not the user's there (nor
 * does a page opened that way act on load: review 22). Anything else
 * cross-site (an image, a script, a frame, a form's GET into a frame, an untrusted fetch) is another site's doing, and
 * so is a speculative load (prefetch, prerender), which a page can ask for without a click. A request without fetch
 * metadata (not a browser, or an old one) is taken as it comes: a non-browser has no cookie of the user's to ride on.
 */
export function requestOfTheUser(
  request: Request,
  trustedOrigins: ReadonlySet<string> | readonly string[],
  options: { crossSiteNavigation: boolean },
): boolean {
  const site = request.headers.get('sec-fetch-site');
  if (site === null || site === 'same-origin' || site === 'same-site' || site === 'none') return true;
  if (speculative(request)) return false;
  const mode = request.headers.get('sec-fetch-mode');
  const dest = request.headers.get('sec-fetch-dest');
  if (options.crossSiteNavigation && mode === 'navigate' && (dest === null || dest === 'document')) return true;
  const origin = request.headers.get('origin');
  const trusted = trustedOrigins instanceof Set ? trustedOrigins : new Set(trustedOrigins);
  return mode === 'cors' && origin !== null && trusted.has(origin);
}

/** A prefetch or prerender the browser makes on a page's say, not the user's. */
export function speculative(request: Request): boolean {
  return request.headers.has('sec-purpose') || /prefetch/i.test(request.headers.get('purpose') ?? '');
}

/**
 * The refusal of a request with the session cookie that another site's page made the user's browser send (security
 * rule 29): thrown by the authenticator for every route that asks who is calling, so no route acts as the user on
 * it; the public routes serve such a request as anyone's instead (`publicCaller`, http/access.ts).
 */
export const crossSiteRequest = () =>
  new ApiError(
    'FORBIDDEN',
    "A request with the session cookie must be the user's own: from the marketplace, a trusted origin or a bookmark, not sent by another site's page",
    { reason: CROSS_SITE_REQUEST },
  );
