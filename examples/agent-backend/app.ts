import { randomBytes } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { getCookie, setCookie } from 'hono/cookie';
import { html } from 'hono/html';
import { ApiError, createMeter, createOAuth, QuotaExceededError, type TokenSet } from '@agent-marketplace/client';

/**
 * A small agent backend on the SDK: "Sign in with the marketplace" (OAuth 2.1, code + PKCE), then one metered call
 * per click ("Summarize"), showing the quota left. Sessions live in memory (a real backend keeps them, and the
 * refresh token, in its own store). Run it: examples/agent-backend/README.md.
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
  pending?: { state: string; codeVerifier: string };
  tokens?: TokenSet;
}

export function agentBackend(options: AgentBackendOptions) {
  const signIn = createOAuth({
    issuer: `${options.marketplaceUrl}/api/auth`,
    clientId: options.clientId,
    clientSecret: options.clientSecret,
    redirectUri: `${options.publicUrl}/callback`,
    allowInsecureHttp: options.marketplaceUrl.startsWith('http://'),
  });
  const sessions = new Map<string, Session>();
  const app = new Hono();

  const session = (c: Context): Session => {
    let id = getCookie(c, 'agent_session');
    if (!id || !sessions.has(id)) {
      id = randomBytes(24).toString('base64url');
      sessions.set(id, {});
      setCookie(c, 'agent_session', id, { httpOnly: true, sameSite: 'Lax', path: '/' });
    }
    return sessions.get(id)!;
  };

  /**
   * The user's access token, refreshed (and the rotated refresh token kept) when it is about to expire or the
   * marketplace refused it (`rejected`: the user signed out there, or it was revoked). Two requests of one user
   * refreshing at once share one refresh (createOAuth), so neither presents a rotated refresh token.
   */
  const accessToken = async (s: Session, rejected?: string): Promise<string> => {
    const stale = rejected === s.tokens!.accessToken || s.tokens!.expiresAt.getTime() - Date.now() < 60_000;
    if (stale && s.tokens!.refreshToken) s.tokens = await signIn.refresh(s.tokens!.refreshToken);
    return s.tokens!.accessToken;
  };
  const meterFor = (s: Session) =>
    createMeter({ baseUrl: options.marketplaceUrl, agentId: options.agentId, accessToken: ({ rejected }) => accessToken(s, rejected) });

  const page = (body: ReturnType<typeof html>) =>
    html`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Summarizer (example agent)</title></head><body>${body}</body></html>`;

  app.get('/', async (c) => {
    const s = session(c);
    if (!s.tokens) return c.html(page(html`<h1>Summarizer</h1><p><a id="sign-in" href="/login">Sign in with the marketplace</a></p>`));
    const usage = await meterFor(s).usage(options.metric);
    return c.html(
      page(html`<h1>Summarizer</h1>
        <p id="status">Signed in. <span id="quota">${usage.remaining ?? 'unlimited'} of ${usage.limit ?? 'unlimited'} left</span></p>
        <form method="post" action="/summarize"><button id="summarize" type="submit">Summarize</button></form>`),
    );
  });

  app.get('/login', async (c) => {
    const s = session(c);
    const { url, state, codeVerifier } = await signIn.authorizationUrl();
    s.pending = { state, codeVerifier };
    return c.redirect(url);
  });

  app.get('/callback', async (c) => {
    const s = session(c);
    if (!s.pending) return c.text('No sign-in in progress', 400);
    const callback = new URL(c.req.url);
    const landed = new URL(`${options.publicUrl}/callback${callback.search}`);
    s.tokens = await signIn.exchangeCode(landed, s.pending);
    s.pending = undefined;
    return c.redirect('/');
  });

  app.post('/summarize', async (c) => {
    const s = session(c);
    if (!s.tokens) return c.redirect('/');
    try {
      const { data, quota } = await meterFor(s).increment(options.metric);
      return c.html(
        page(html`<h1>Summarizer</h1><p id="result">Summary written (call ${data.used}).</p>
          <p id="quota">${quota.remaining ?? 'unlimited'} of ${quota.limit ?? 'unlimited'} left</p><p><a href="/">Back</a></p>`),
      );
    } catch (err) {
      if (!(err instanceof QuotaExceededError)) throw err;
      const when = err.periodEnd ? `It resets on ${err.periodEnd.toISOString().slice(0, 10)}.` : 'It does not reset by itself.';
      return c.html(page(html`<h1>Summarizer</h1><p id="result">Your plan's quota is used up (${err.used} of ${err.limit}). ${when}</p>`), 429);
    }
  });

  // The grant ended (the user withdrew consent or signed out everywhere, an admin banned them): a refresh is refused
  // (invalid_grant) or the marketplace answers 401 after the meter's one renewal. The user signs in again.
  app.onError((err, c) => {
    if ((err as { error?: unknown }).error === 'invalid_grant' || (err instanceof ApiError && err.status === 401)) {
      delete session(c).tokens;
      return c.redirect('/login');
    }
    console.error(err);
    return c.text('Internal Server Error', 500);
  });

  return app;
}
