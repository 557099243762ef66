import { Hono, type Context } from 'hono';
import type { AppEnv } from '../../platform/app-types.ts';
import { builtInPage, returnPathAfterSignIn } from '../../http/built-in-pages.ts';
import { escapeHtml, randomNonce } from '../../http/html.ts';
import type { Config } from '../../platform/config.ts';
import { first, sql } from '../../platform/db.ts';
import { authorizeParamsOf, decodeConsentCode } from './consent-code.ts';
import { ADMIN_SCOPE, OAUTH_SCOPES } from './provider-options.ts';
import { jsonStrings, promptsOf } from './protocol-gaps.ts';

/**
 * The minimal built-in /sign-in, /sign-up and /consent pages, served when there is no FRONTEND_URL so that the
 * OAuth flow of an agent works out of the box (and in the browser test). A real front end replaces them by
 * setting FRONTEND_URL; the library then sends browsers there instead and these routes are not mounted.
 *
 * The pages talk to the same public endpoints a front end would: sign-in/up through /api/auth with fetch, then
 * the authorize URL again (rebuilt from the signed query the library put on the sign-in URL, less the prompt the
 * sign-in satisfied: satisfiedBySignIn) to continue; the
 * consent page posts a plain form `{ accept, consent_code }` to /api/auth/oauth2/consent, which answers 302.
 * Every page sets a strict CSP (scripts by nonce only) and refuses framing, so the consent buttons cannot be
 * clickjacked.
 */

const SCOPE_TEXT: Record<string, string> = {
  openid: 'Know who you are (your account id)',
  profile: 'See your name and picture',
  email: 'See your email address',
  offline_access: 'Keep access while you are away',
};

const GRANTABLE_SCOPES = new Set<string>([...OAUTH_SCOPES, ADMIN_SCOPE]);

/**
 * The scopes a client may be granted: those registered for it, within the grantable ones; a client with none
 * registered may be granted the server's.
 */
function grantableTo(registered: unknown): Set<string> {
  const own = jsonStrings(registered);
  return own.length === 0 ? GRANTABLE_SCOPES : new Set(own.filter((s) => GRANTABLE_SCOPES.has(s)));
}

export function oauthPages(config: Config) {
  const router = new Hono<AppEnv>();
  if (config.frontendUrl) return router;

  // Public pages: nothing on them is personal until the visitor signs in.
  router.get('/sign-in', (c) => credentialsPage(c, 'sign-in'));
  router.get('/sign-up', (c) => credentialsPage(c, 'sign-up'));

  router.get('/consent', async (c) => {
    const signedQuery = decodeConsentCode(c.req.query('consent_code') ?? '');
    if (!signedQuery) {
      return page(c, 400, 'Consent link not valid', '<p>This consent link is malformed. Start again from the application.</p>');
    }
    const params = new URLSearchParams(signedQuery);
    const clientId = params.get('client_id') ?? '';
    // Decoded from the consent code (base64), so the URL's NUL check never saw it; PostgreSQL refuses a NUL in text.
    if (clientId.includes('\0')) {
      return page(c, 400, 'Consent link not valid', '<p>This consent link is not one we made. Start again from the application.</p>');
    }
    // The agent's current name (it may have been renamed since its client was created).
    const client = await first<{ name: string | null; scopes: unknown }>(
      c.var.deps.database.db,
      sql`select coalesce(a.name, c.name) as name, c.scopes
            from "oauthClient" c
            left join public.agent_oauth_clients ac on ac.client_id = c."clientId"
            left join public.agents a on a.id = ac.agent_id
           where c."clientId" = ${clientId}`,
    );
    const scopes = (params.get('scope') ?? '').split(' ').filter(Boolean);
    // The signature is checked only when the consent is posted, so anyone can write a code of this shape: the page
    // shows nothing a link wrote. A client we do not have, or a scope no client may be granted (the authorize
    // endpoint refuses both before it makes a code), is no consent we sent anyone to; showing it put a stranger's
    // words on this page as the application's name or as what it may do. The scopes are this client's own: `admin`
    // belongs to the first-party client only, and a link naming an agent with it is no request of that agent's.
    if (!client || scopes.some((s) => !grantableTo(client.scopes).has(s))) {
      return page(c, 400, 'Consent link not valid', '<p>This consent link is not one we made. Start again from the application.</p>');
    }
    const appName = client.name || clientId;
    const items = scopes.map((s) => `<li>${escapeHtml(SCOPE_TEXT[s] ?? s)}</li>`).join('');
    const body = `
      <p><strong id="client-name">${escapeHtml(appName)}</strong> wants to use your Agent Marketplace account.</p>
      <p>It will be able to:</p>
      <ul id="scopes">${items}</ul>
      <form method="post" action="/api/auth/oauth2/consent">
        <input type="hidden" name="consent_code" value="${escapeHtml(c.req.query('consent_code') ?? '')}">
        <button type="submit" name="accept" value="true" id="allow">Allow</button>
        <button type="submit" name="accept" value="false" id="deny" class="secondary">Deny</button>
      </form>`;
    return page(c, 200, `Allow ${appName}?`, body);
  });

  return router;
}

function credentialsPage(c: Context<AppEnv>, kind: 'sign-in' | 'sign-up') {
  const search = new URL(c.req.url).search;
  const authorize = authorizeParamsOf(search);
  // Only the library's own redirect carries client_id + response_type; then we continue at our authorize endpoint
  // (a fixed path: the query cannot send the browser anywhere else).
  // Or the verification link that sent a signed-out browser here (email-verification.ts): opened again once signed in.
  const verify = new URL(c.req.url).searchParams.get('verify') ?? '';
  const verifyUrl = kind === 'sign-in' && verify.startsWith('/api/auth/verify-email?') ? verify : '';
  // Or a built-in page that needs a session (an invitation, the billing page): only those, never another site.
  const returnPath = returnPathAfterSignIn(new URL(c.req.url).searchParams.get('next'));
  const continueUrl =
    authorize.has('client_id') && authorize.has('response_type') ? `/api/auth/oauth2/authorize?${satisfiedBySignIn(authorize)}` : verifyUrl || returnPath;
  const notice = verifyUrl ? '<p id="notice">Sign in to confirm your email address.</p>' : '';
  const other = kind === 'sign-in' ? '/sign-up' : '/sign-in';
  const nonce = randomNonce();
  const nameField =
    kind === 'sign-up'
      ? '<label for="name">Name</label><input id="name" name="name" autocomplete="name" required maxlength="100">'
      : '';
  // The script below posts the form with fetch. Without it (scripts off or blocked) the browser submits the form
  // itself: as a POST, so the password never goes into a URL (address bar, history, proxy logs); a GET, the
  // default of a form without a method, put it there.
  const body = `
    ${notice}
    <form id="credentials" method="post" data-endpoint="/api/auth/${kind}/email" data-continue="${escapeHtml(continueUrl)}">
      ${nameField}
      <label for="email">Email</label>
      <input id="email" name="email" type="email" autocomplete="email" required>
      <label for="password">Password</label>
      <input id="password" name="password" type="password" minlength="8"
             autocomplete="${kind === 'sign-in' ? 'current-password' : 'new-password'}" required>
      <button type="submit" id="submit">${kind === 'sign-in' ? 'Sign in' : 'Create account'}</button>
      <p id="status" role="status"></p>
    </form>
    <p>${kind === 'sign-in' ? 'No account yet?' : 'Already have an account?'}
       <a href="${escapeHtml(other + search)}">${kind === 'sign-in' ? 'Create one' : 'Sign in'}</a></p>
    ${kind === 'sign-in' ? '<p><a id="forgot" href="/reset-password">Forgot your password?</a></p>' : ''}
    <script nonce="${nonce}">
      const form = document.getElementById('credentials');
      const status = document.getElementById('status');
      form.addEventListener('submit', async (event) => {
        event.preventDefault();
        status.textContent = '';
        const data = Object.fromEntries(new FormData(form));
        const post = (endpoint, body) => fetch(endpoint, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          credentials: 'same-origin',
          body: JSON.stringify(body),
        });
        let res = await post(form.dataset.endpoint, data);
        // Sign-up does not sign in (it answers the same whether or not the address has an account): sign in next.
        if (res.ok && form.dataset.endpoint.endsWith('/sign-up/email')) {
          res = await post('/api/auth/sign-in/email', { email: data.email, password: data.password });
          if (!res.ok) {
            status.textContent = 'Check your mail: we sent a message to this address.';
            return;
          }
        }
        if (!res.ok) {
          const body = await res.json().catch(() => ({}));
          status.textContent = (body.error && body.error.message) || body.message || 'That did not work, try again.';
          return;
        }
        if (form.dataset.continue) location.assign(form.dataset.continue);
        else status.textContent = 'You are signed in.';
      });
    </script>`;
  return page(c, 200, kind === 'sign-in' ? 'Sign in' : 'Create an account', body, nonce);
}

/**
 * The authorize query to request again once the user has signed in on this page: without what the sign-in just did.
 * `prompt=login` (an agent asking for a fresh sign-in), `prompt=create` (for a new account) and `max_age` (a sign-in
 * no older than that) sent the browser here; asked again with them, the library sent the new session back to this
 * page, for ever (review 69). The library does the same when a sign-in carries its signed query (`oauth_query`).
 */
function satisfiedBySignIn(authorize: URLSearchParams): URLSearchParams {
  const query = new URLSearchParams(authorize);
  const prompts = promptsOf(query).filter((p) => p !== 'login' && p !== 'create');
  if (prompts.length > 0) query.set('prompt', prompts.join(' '));
  else query.delete('prompt');
  query.delete('max_age');
  return query;
}

function page(c: Context<AppEnv>, status: 200 | 400, title: string, body: string, nonce?: string) {
  // The consent form's answer is a 302 to the agent's redirect_uri, on any origin.
  return builtInPage(c, status, title, body, { nonce, formAction: "'self' http: https:" });
}
