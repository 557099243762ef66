import type { Context } from 'hono';
import type { AppEnv } from '../platform/app-types.ts';
import { notFound } from './errors.ts';
import { htmlPage } from './html.ts';

/**
 * The small pages the service serves itself when there is no FRONTEND_URL, so that every link it sends (mails,
 * Stripe's return addresses, the OAuth flow) opens something on a deployment without a front end: /sign-in,
 * /sign-up, /consent (auth/oauth/pages.ts), /reset-password, /accept-invitation (auth/account-pages.ts), /claim
 * (billing/claim-page.ts), /checkout/success, /checkout/canceled, /account/billing (billing/return-pages.ts).
 * A front end replaces them all by setting FRONTEND_URL: the links then point there and these paths answer 404.
 *
 * They talk to the same public endpoints a front end would, with fetch from a script that carries the page's CSP
 * nonce; anything that changes state waits for a click (a mail scanner or a prefetch that opens a link changes
 * nothing). Values from the query reach the HTML only through escapeHtml, and the scripts put text into the page
 * with textContent only.
 */

/** 404 when a front end serves the pages (FRONTEND_URL is set). */
export function requireBuiltInPages(c: Context<AppEnv>): void {
  if (c.var.deps.config.frontendUrl) throw notFound('Page');
}

export interface BuiltInPageOptions {
  /** The nonce of the page's script (see `pageScript`); without one no script runs. */
  nonce?: string | undefined;
  /** Where forms may post: the page itself only, unless a form is meant to leave (the consent form's 302 to the agent). */
  formAction?: string;
}

export function builtInPage(c: Context<AppEnv>, status: 200 | 400, title: string, body: string, options: BuiltInPageOptions = {}): Response {
  return htmlPage(c, status, {
    title,
    titleSuffix: ' · Agent Marketplace',
    style: STYLE,
    body,
    nonce: options.nonce,
    directives: [`form-action ${options.formAction ?? "'self'"}`],
  });
}

/**
 * The page's script, after the helpers every built-in page uses:
 * - `$(id)`: the element;
 * - `say(text)`: the status line;
 * - `api(method, url, body?, credentials?)`: one call to our API or the auth library, answering
 *   `{ status, ok, data, code, message }` whichever shape the answer has (the envelope, or the library's
 *   `{ code, message }`); a network failure is `status: 0` with a message, never a thrown error.
 */
export function pageScript(nonce: string, code: string): string {
  return `<script nonce="${nonce}">${HELPERS}${code}
    </script>`;
}

const HELPERS = `
      const $ = (id) => document.getElementById(id);
      const say = (text) => { $('status').textContent = text; };
      const api = async (method, url, body, credentials = 'same-origin') => {
        const init = { method, credentials };
        if (body !== undefined) {
          init.headers = { 'content-type': 'application/json' };
          init.body = JSON.stringify(body);
        }
        const res = await fetch(url, init).catch(() => undefined);
        if (!res) return { status: 0, ok: false, message: 'The service did not answer: check the connection and try again.' };
        const json = await res.json().catch(() => ({}));
        const error = json && typeof json.error === 'object' && json.error ? json.error : json || {};
        return {
          status: res.status,
          ok: res.ok,
          data: json && json.data !== undefined ? json.data : json,
          code: error.code,
          message: error.message || 'That did not work, try again.',
        };
      };`;

/**
 * Where the sign-in page may send the visitor once signed in (`/sign-in?next=...`): built-in pages that need a
 * session, nothing else, so the parameter cannot send anyone to another site or to an endpoint.
 */
const RETURN_PATHS = new Set(['/accept-invitation', '/checkout/success', '/account/billing']);

/** The sign-in page's link for a page that needs a session: it comes back to `pathAndQuery` once signed in. */
export function signInComingBackTo(pathAndQuery: string): string {
  return `/sign-in?next=${encodeURIComponent(pathAndQuery)}`;
}

/** The page to continue to after signing in, from the sign-in page's `next`: a path (and query) among RETURN_PATHS, else ''. */
export function returnPathAfterSignIn(next: string | null | undefined): string {
  if (!next || !next.startsWith('/')) return '';
  const base = 'http://pages.invalid';
  let url: URL;
  try {
    url = new URL(next, base);
  } catch {
    return '';
  }
  // `//evil.example/...` or `/\evil.example` parse to another origin: refused with everything else unknown.
  if (url.origin !== base || !RETURN_PATHS.has(url.pathname)) return '';
  return url.pathname + url.search;
}

const STYLE = `    body { font-family: system-ui, sans-serif; max-width: 28rem; margin: 4rem auto; padding: 0 1rem; color: #1b1b1f; }
    h1 { font-size: 1.4rem; }
    label { display: block; margin-top: .8rem; font-size: .9rem; }
    input { width: 100%; box-sizing: border-box; padding: .5rem; margin-top: .2rem; }
    button { margin-top: 1rem; padding: .55rem 1.2rem; border: 0; border-radius: .3rem; background: #3b4cca; color: #fff; cursor: pointer; }
    button.secondary { background: #e4e4ea; color: #1b1b1f; }
    #status { color: #b3261e; min-height: 1.2rem; }`;
