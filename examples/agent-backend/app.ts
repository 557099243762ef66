import { randomBytes } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { html } from 'hono/html';
import {
  ApiError,
  apiErrorOf,
  createMarketplaceClient,
  createMeter,
  createOAuth,
  NetworkError,
  NotFoundError,
  QuotaExceededError,
  RateLimitedError,
  SubscriptionRequiredError,
  type TokenSet,
} from '@agent-marketplace/client';

/**
 * A small agent backend on the SDK: "Sign in with the marketplace" (OAuth 2.1, code + PKCE), then one metered call
 * per click ("Summarize"), showing the quota left. Sessions live in memory (a real backend keeps them, and the
 * refresh token, in its own store). Run it: examples/agent-backend/README.md.
 *
 * What it does about its own users' safety, since backends copy it (review 28 found each missing):
 *  - a session exists only once a user signed in, under a new id made then (an id known before sign-in, planted in the
 *    victim's browser, never becomes theirs), in a cookie that is HttpOnly, SameSite=Lax and, on https, Secure with the
 *    `__Host-` prefix; sessions end after a day unused, and at most MAX_SESSIONS are kept (a visitor costs nothing);
 *  - each sign-in in progress is kept by its `state`, bound to the browser that started it (its own short cookie), so
 *    two tabs signing in at once both finish, and a callback of another browser's sign-in (login CSRF) is refused;
 *  - a denied consent, a sign-in that can no longer finish and a subscription that ended are pages, not 500s; a user
 *    with no subscription is offered the agent's public tiers here and subscribes with their own token (POST
 *    /me/checkout): a free tier at once, a paid one on the marketplace's checkout page (review 94: the page linked to
 *    the marketplace's API, JSON in the browser, where nobody can subscribe);
 *  - the forms that act (summarize, subscribe, sign out) are refused when another site posts them (Origin,
 *    Sec-Fetch-Site);
 *  - each Summarize the page offers is one user action with its own clientReqId, minted with the page and kept in the
 *    session until its summary is written: when the marketplace's answer is lost (NetworkError, or a 503 that outlasted
 *    the retries: the call may have been counted), the page offers to try that same action again, whose increment is then
 *    a replay, not a second charge; a double click, or the same form sent again, is refused (review 86: a lost answer
 *    was a bare 500 and the user's next click a new increment, counted twice for one summary).
 */

export interface AgentBackendOptions {
  /** The marketplace, e.g. http://127.0.0.1:8000 */
  marketplaceUrl: string;
  agentId: string;
  clientId: string;
  clientSecret: string;
  /** Where this backend is reachable; its /callback must be one of the agent's redirectUris. */
  publicUrl: string;
  /** The metric each call counts. */
  metric: string;
}

interface Session {
  tokens: TokenSet;
  lastSeen: number;
  /** Summarize actions offered by this session's pages (each a clientReqId): ready, or under way. */
  actions: Map<string, 'ready' | 'running'>;
}

/** A sign-in in progress, kept in the browser that started it (the sign-in cookie), never on the server. */
interface SignInInProgress {
  state: string;
  codeVerifier: string;
  startedAt: number;
}

const SESSION_IDLE_MS = 24 * 3600_000;
const SIGN_IN_MS = 10 * 60_000;
const MAX_SESSIONS = 10_000;
/** Sign-ins in progress one browser keeps at once (tabs); the oldest is forgotten beyond that. */
const SIGN_INS_PER_BROWSER = 3;
/** Summarize actions one session keeps offered at once (pages open in tabs); the oldest is forgotten beyond that. */
const ACTIONS_PER_SESSION = 20;

const newId = () => randomBytes(24).toString('base64url');

/** Sets `key` as the newest entry of `map`, forgetting the oldest beyond `max` (a Map keeps insertion order). */
function bounded<V>(map: Map<string, V>, max: number, key: string, value: V): void {
  map.delete(key);
  map.set(key, value);
  while (map.size > max) map.delete(map.keys().next().value!);
}

export function agentBackend(options: AgentBackendOptions) {
  const signIn = createOAuth({
    issuer: `${options.marketplaceUrl}/api/auth`,
    clientId: options.clientId,
    clientSecret: options.clientSecret,
    redirectUri: `${options.publicUrl}/callback`,
    allowInsecureHttp: options.marketplaceUrl.startsWith('http://'),
  });
  const ownOrigin = new URL(options.publicUrl).origin;
  const secure = ownOrigin.startsWith('https:');
  const SESSION_COOKIE = secure ? '__Host-agent_session' : 'agent_session';
  const SIGN_IN_COOKIE = secure ? '__Host-agent_sign_in' : 'agent_sign_in';
  const cookieOptions = { httpOnly: true, sameSite: 'Lax', path: '/', secure } as const;
  const sessions = new Map<string, Session>();
  const app = new Hono();

  /** The signed-in user's session, or undefined (none, unknown, or a day unused). */
  const sessionOf = (c: Context): Session | undefined => {
    const id = getCookie(c, SESSION_COOKIE);
    const s = id ? sessions.get(id) : undefined;
    if (!id || !s) return undefined;
    if (Date.now() - s.lastSeen > SESSION_IDLE_MS) {
      sessions.delete(id);
      return undefined;
    }
    s.lastSeen = Date.now();
    bounded(sessions, MAX_SESSIONS, id, s);
    return s;
  };
  const signOut = (c: Context) => {
    const id = getCookie(c, SESSION_COOKIE);
    if (id) sessions.delete(id);
    deleteCookie(c, SESSION_COOKIE, cookieOptions);
  };
  /** A form post of this backend's own pages; another site's is refused (its Origin, or the browser's fetch metadata). */
  const fromOwnPage = (c: Context) => {
    const origin = c.req.header('origin');
    const site = c.req.header('sec-fetch-site');
    return (origin === undefined || origin === ownOrigin) && (site === undefined || site === 'same-origin');
  };

  /**
   * The user's access token, refreshed (and the rotated refresh token kept) when it is about to expire or the
   * marketplace refused it (`rejected`: the user signed out there, or it was revoked). Two requests of one user
   * refreshing at once share one refresh (createOAuth), so neither presents a rotated refresh token.
   */
  const accessToken = async (s: Session, rejected?: string): Promise<string> => {
    const stale = rejected === s.tokens.accessToken || s.tokens.expiresAt.getTime() - Date.now() < 60_000;
    if (stale && s.tokens.refreshToken) s.tokens = await signIn.refresh(s.tokens.refreshToken);
    return s.tokens.accessToken;
  };
  const meterFor = (s: Session) =>
    createMeter({ baseUrl: options.marketplaceUrl, agentId: options.agentId, accessToken: ({ rejected }) => accessToken(s, rejected) });
  /** Every other operation, typed from the marketplace's /openapi.json, as the signed-in user through this agent. */
  const marketplaceFor = (s: Session) => createMarketplaceClient({ baseUrl: options.marketplaceUrl, accessToken: () => accessToken(s) });

  const page = (body: ReturnType<typeof html>) =>
    html`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Summarizer (example agent)</title></head><body>${body}</body></html>`;
  const signInPage = (note = '') =>
    page(html`<h1>Summarizer</h1>${note ? html`<p id="note">${note}</p>` : ''}<p><a id="sign-in" href="/login">Sign in with the marketplace</a></p>`);
  const signOutForm = html`<form method="post" action="/logout"><button id="sign-out" type="submit">Sign out</button></form>`;
  // The marketplace answers 402 (increment) or 404 (usage) once the user's subscription to the agent has ended.
  const noSubscription = (err: unknown) => err instanceof SubscriptionRequiredError || err instanceof NotFoundError;
  /** No subscription yet (or no more): the agent's public tiers, each a form that subscribes the user (POST /subscribe). */
  const subscribePage = async (s: Session, note = '') => {
    const { data } = await marketplaceFor(s).GET('/agents/{agentId}/pricing', { params: { path: { agentId: options.agentId } } });
    const tiers = (data?.data ?? []).filter((tier) => !tier.contactSales);
    const price = (cents: number, currency: string, interval: string) =>
      cents === 0 ? 'free' : `${(cents / 100).toFixed(2)} ${currency.toUpperCase()} a ${interval}`;
    return page(html`<h1>Summarizer</h1>${note ? html`<p id="note">${note}</p>` : ''}
      <p id="status">Signed in, with no active subscription to this agent. Choose a plan:</p>
      <ul>${tiers.map(
        (tier) => html`<li><form method="post" action="/subscribe"><input type="hidden" name="tierId" value="${tier.id}">
          ${tier.name} (${price(tier.priceCents!, tier.currency!, tier.interval!)})
          <button class="subscribe" type="submit">Subscribe</button></form></li>`,
      )}</ul>${signOutForm}`);
  };

  /** The Summarize form for one user action: its clientReqId, sent again as is when the user tries it again. */
  const summarizeForm = (action: string, label = 'Summarize') =>
    html`<form method="post" action="/summarize"><input type="hidden" name="action" value="${action}"><button id="summarize" type="submit">${label}</button></form>`;
  const newAction = (s: Session) => {
    const action = crypto.randomUUID();
    bounded(s.actions, ACTIONS_PER_SESSION, action, 'ready');
    return action;
  };
  // No answer from the marketplace, or only 502-504 until the retries were spent: the increment may have been counted.
  const unconfirmed = (err: unknown) => err instanceof NetworkError || (err instanceof ApiError && err.status >= 502 && err.status <= 504);

  app.get('/', async (c) => {
    const s = sessionOf(c);
    if (!s) return c.html(signInPage());
    try {
      const usage = await meterFor(s).usage(options.metric);
      return c.html(
        page(html`<h1>Summarizer</h1>
          <p id="status">Signed in. <span id="quota">${usage.remaining ?? 'unlimited'} of ${usage.limit ?? 'unlimited'} left</span></p>
          ${summarizeForm(newAction(s))}${signOutForm}`),
      );
    } catch (err) {
      if (noSubscription(err)) return c.html(await subscribePage(s));
      throw err;
    }
  });

  /**
   * The sign-ins in progress live in the browser that started them: `state.codeVerifier.startedAt` entries in an
   * HttpOnly cookie, at most SIGN_INS_PER_BROWSER (two tabs both finish). Kept on the server, in one map for every
   * visitor, anyone requesting /login 10,000 times pushed out every real sign-in in progress (found by review 41).
   */
  const signInsOf = (c: Context): SignInInProgress[] =>
    (getCookie(c, SIGN_IN_COOKIE) ?? '')
      .split('~')
      .map((entry) => entry.split('.'))
      .filter((parts) => parts.length === 3 && Date.now() - Number(parts[2]) <= SIGN_IN_MS)
      .map(([state, codeVerifier, startedAt]) => ({ state: state!, codeVerifier: codeVerifier!, startedAt: Number(startedAt) }));
  const keepSignIns = (c: Context, list: SignInInProgress[]) => {
    if (list.length === 0) return deleteCookie(c, SIGN_IN_COOKIE, cookieOptions);
    const value = list.map((s) => `${s.state}.${s.codeVerifier}.${s.startedAt}`).join('~');
    setCookie(c, SIGN_IN_COOKIE, value, { ...cookieOptions, maxAge: SIGN_IN_MS / 1000 });
  };

  app.get('/login', async (c) => {
    const { url, state, codeVerifier } = await signIn.authorizationUrl();
    keepSignIns(c, [{ state, codeVerifier, startedAt: Date.now() }, ...signInsOf(c)].slice(0, SIGN_INS_PER_BROWSER));
    return c.redirect(url);
  });

  app.get('/callback', async (c) => {
    const landed = new URL(`${options.publicUrl}/callback${new URL(c.req.url).search}`);
    const state = landed.searchParams.get('state') ?? '';
    const inProgress = signInsOf(c);
    const started = state ? inProgress.find((s) => s.state === state) : undefined;
    keepSignIns(c, inProgress.filter((s) => s !== started)); // a state is used once, whatever comes of it
    if (!started) {
      return c.html(signInPage('This sign-in can no longer finish here (it was started in another browser, or too long ago): start again.'), 400);
    }
    if (landed.searchParams.has('error')) {
      const denied = landed.searchParams.get('error') === 'access_denied';
      return c.html(signInPage(denied ? 'Sign-in cancelled: you did not allow the Summarizer.' : 'The marketplace could not sign you in: start again.'));
    }
    let tokens: TokenSet;
    try {
      tokens = await signIn.exchangeCode(landed, { state, codeVerifier: started.codeVerifier });
    } catch (err) {
      console.error('sign-in failed', (err as Error).message);
      return c.html(signInPage('The marketplace could not sign you in: start again.'), 400);
    }
    // A new session id at sign-in: whatever id this browser held before is not the signed-in user's (fixation).
    signOut(c);
    const id = newId();
    bounded(sessions, MAX_SESSIONS, id, { tokens, lastSeen: Date.now(), actions: new Map() });
    setCookie(c, SESSION_COOKIE, id, cookieOptions);
    return c.redirect('/');
  });

  app.post('/summarize', async (c) => {
    if (!fromOwnPage(c)) return c.text('Forbidden: send this from the Summarizer page', 403);
    const s = sessionOf(c);
    if (!s) return c.redirect('/');
    const action = (await c.req.parseBody().catch((): Record<string, unknown> => ({})))['action'];
    // Only an action this session's page offered, once: the same form sent twice (a double click, the back button)
    // would otherwise write a second summary on the first one's count (its increment a replay).
    if (typeof action !== 'string' || s.actions.get(action) !== 'ready') {
      return c.html(page(html`<h1>Summarizer</h1><p id="result">This Summarize was already done, or is under way.</p><p><a href="/">Back</a></p>`), 409);
    }
    s.actions.set(action, 'running');
    let again = false;
    try {
      const { data, quota } = await meterFor(s).increment(options.metric, { clientReqId: action });
      // (the summary itself would be written here: the increment, new or a replay of a lost answer, counted it)
      return c.html(
        page(html`<h1>Summarizer</h1><p id="result">Summary written (call ${data.used}).</p>
          <p id="quota">${quota.remaining ?? 'unlimited'} of ${quota.limit ?? 'unlimited'} left</p><p><a href="/">Back</a></p>`),
      );
    } catch (err) {
      if (unconfirmed(err)) {
        again = true;
        return c.html(
          page(html`<h1>Summarizer</h1><p id="result">The marketplace did not answer, so this summary is not written yet.
            Trying it again will not count it twice.</p>${summarizeForm(action, 'Try again')}<p><a href="/">Back</a></p>`),
          503,
        );
      }
      if (noSubscription(err)) return c.html(await subscribePage(s), 402);
      if (!(err instanceof QuotaExceededError)) throw err;
      const when = err.periodEnd ? `It resets on ${err.periodEnd.toISOString().slice(0, 10)}.` : 'It does not reset by itself.';
      return c.html(page(html`<h1>Summarizer</h1><p id="result">Your plan's quota is used up (${err.used} of ${err.limit}). ${when}</p>`), 429);
    } finally {
      if (again) s.actions.set(action, 'ready');
      else s.actions.delete(action);
    }
  });

  /**
   * Subscribes the signed-in user to one of the agent's tiers with their own token (an agent's token may start a
   * checkout for its own agent's tiers only): a free tier is active at once (201), a paid one is paid on the
   * marketplace's checkout page (200 { checkoutUrl }), which returns the user to the marketplace; they come back here.
   */
  app.post('/subscribe', async (c) => {
    if (!fromOwnPage(c)) return c.text('Forbidden: send this from the Summarizer page', 403);
    const s = sessionOf(c);
    if (!s) return c.redirect('/');
    const tierId = (await c.req.parseBody().catch((): Record<string, unknown> => ({})))['tierId'];
    if (typeof tierId !== 'string') return c.html(await subscribePage(s, 'Choose one of the plans below.'), 400);
    const { data, error, response } = await marketplaceFor(s).POST('/me/checkout', { body: { tierId } });
    // The token refused (401: sign in again) or the marketplace asking to slow down (429): as every other call (onError).
    if (response.status === 401 || response.status === 429) throw apiErrorOf(response, error);
    if (response.status === 201) return c.redirect('/', 303);
    const checkoutUrl = (data?.data as { checkoutUrl?: string } | undefined)?.checkoutUrl;
    if (checkoutUrl) return c.redirect(checkoutUrl, 303);
    // Already subscribed (409), the plan gone (404), payments not set up on this marketplace (503), ...: say so.
    console.error('checkout refused', response.status, error?.error?.code);
    return c.html(await subscribePage(s, `The marketplace did not start this subscription: ${error?.error?.message ?? response.status}`), 409);
  });

  app.post('/logout', (c) => {
    if (!fromOwnPage(c)) return c.text('Forbidden: send this from the Summarizer page', 403);
    signOut(c);
    return c.redirect('/');
  });

  // The grant ended (the user withdrew consent or signed out everywhere, an admin banned them): a refresh is refused
  // (invalid_grant) or the marketplace answers 401 after the meter's one renewal. The user signs in again.
  app.onError((err, c) => {
    if ((err as { error?: unknown }).error === 'invalid_grant' || (err instanceof ApiError && err.status === 401)) {
      signOut(c);
      return c.redirect('/login');
    }
    // The marketplace refused this backend itself (its client secret rotated, its agent's client gone) or asked it to
    // slow down (a 429 of the API or of the token endpoint): a page saying so, not a 500; the log says which.
    // (A refused client secret is the token endpoint's 401 with a Basic challenge: oauth4webapi's
    // OAUTH_WWW_AUTHENTICATE_CHALLENGE; an `invalid_client` body, when there is no challenge.)
    const { status, code, error } = err as { status?: unknown; code?: unknown; error?: unknown };
    const clientRefused = error === 'invalid_client' || (code === 'OAUTH_WWW_AUTHENTICATE_CHALLENGE' && status === 401);
    if (clientRefused || err instanceof RateLimitedError || status === 429) {
      console.error('the marketplace refused this backend', (err as Error).message);
      return c.html(page(html`<h1>Summarizer</h1><p id="result">The Summarizer cannot reach the marketplace right now: try again in a few minutes.</p>`), 503);
    }
    console.error(err);
    return c.text('Internal Server Error', 500);
  });

  return app;
}
