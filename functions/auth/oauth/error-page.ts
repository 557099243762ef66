import { Hono } from 'hono';
import type { AppEnv } from '../../platform/app-types.ts';
import { builtInPage } from '../../http/built-in-pages.ts';
import { escapeHtml } from '../../http/html.ts';

/**
 * GET /api/auth/error: where the authorization server sends a browser it cannot send back to the application
 * (an unregistered redirect_uri, an unknown or disabled client, a malformed request: RFC 6749 §4.1.2.1 says such
 * errors must not go to the redirect URI). Both our authorize wrapper and the library send people here.
 *
 * Ours, not the library's, because the library's page is not fit to serve: under NODE_ENV=production it answers
 * with a 302 to `/?error=...` on the API's own origin, where nothing is served (the user saw a JSON 404 "No route
 * for GET /"), and elsewhere its page sends no frame-ancestors. Served whether or not a FRONTEND_URL is set: it is
 * the authorization server's page, not one a front end replaces.
 *
 * The code and description come from the link, so anyone can make this page show them: the code is shown only
 * when it is a plain token (else `unknown`), the description only as escaped printable ASCII, cut to 300 characters,
 * below a fixed explanation and labelled as the link's, and nothing on the page acts.
 */

const EXPLANATIONS: Record<string, string> = {
  invalid_redirect: 'The application asked to send you back to an address it has not registered with the marketplace, so sign-in stopped here.',
  invalid_request: "The application's sign-in request was not valid, so sign-in stopped here.",
  invalid_client: 'The application that sent you here is not known to the marketplace.',
  client_disabled: 'The application that sent you here has been disabled on the marketplace.',
  unauthorized_client: 'The application that sent you here may not sign people in this way.',
  unsupported_response_type: 'The application that sent you here asked for something the marketplace does not offer.',
};

const MAX_DESCRIPTION = 300;

export function authorizationErrorPage() {
  const router = new Hono<AppEnv>();
  router.get('/api/auth/error', (c) => {
    const raw = c.req.query('error') ?? '';
    const code = /^[A-Za-z0-9_-]{1,64}$/.test(raw) ? raw : 'unknown';
    const explanation = EXPLANATIONS[code] ?? 'Sign-in could not continue.';
    // Printable ASCII only: our descriptions and the library's are English, and anything else a made-up link could
    // put here (bidirectional overrides that show `\u202Enigol/elpmaxe...` as an address it is not, zero-width
    // characters, lookalike letters) is dropped (found by a review).
    const description = (c.req.query('error_description') ?? '').replace(/[^\x20-\x7E]/g, '').trim().slice(0, MAX_DESCRIPTION);
    const detail = description ? `${escapeHtml(code)}: ${escapeHtml(description)}` : escapeHtml(code);
    const body = `<p>${escapeHtml(explanation)}</p>
  <p>Go back to the application and try again. If it keeps happening, tell the application's developers what is below.</p>
  <p><small>Error, as the link that brought you here gave it: <code id="error">${detail}</code></small></p>`;
    return builtInPage(c, 400, 'Sign-in could not continue', body);
  });
  return router;
}
