/**
 * The agent developer's quickstart (docs/quickstart.md), as one script with no dependencies: Node 24's fetch and
 * crypto only. It plays three parts against a running marketplace, in order:
 *   1. the marketplace admin: an agent (with its OAuth client), a free tier, a metric and its quota;
 *   2. a user and their browser: sign-up, sign-in, the OAuth 2.1 authorization-code flow with PKCE and consent;
 *   3. the agent's backend: code exchange, check-and-increment with idempotency keys, a replay, the quota's 429,
 *      token refresh (rotation) and revocation.
 *
 *   npm start                                    # another terminal: the service on http://127.0.0.1:8000
 *   npx node examples/quickstart/quickstart.ts   # MARKETPLACE_URL, ADMIN_EMAIL, ADMIN_PASSWORD to override
 *
 * With nothing set it signs in as the demo admin that `npm start` created (.data/admin-credentials.json; under
 * DATA_DIR when the server was started with one: give the script the same DATA_DIR).
 * The test suite runs this file against the real service (tests/foundation/quickstart.test.ts), so it cannot rot.
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';

const BASE = (process.env.MARKETPLACE_URL ?? 'http://127.0.0.1:8000').replace(/\/+$/, '');
// The agent backend's OAuth callback. The script reads the code off the redirect instead of serving this URL.
const REDIRECT_URI = 'http://127.0.0.1:8788/callback';

function adminCredentials(): { email: string; password: string } {
  if (process.env.ADMIN_EMAIL && process.env.ADMIN_PASSWORD) return { email: process.env.ADMIN_EMAIL, password: process.env.ADMIN_PASSWORD };
  const file = `${process.env.DATA_DIR ?? '.data'}/admin-credentials.json`;
  if (existsSync(file)) return JSON.parse(readFileSync(file, 'utf8'));
  throw new Error(`Set ADMIN_EMAIL and ADMIN_PASSWORD (a platform admin of the marketplace), or DATA_DIR to the server's (no ${file})`);
}

const step = (text: string) => console.log(`\n== ${text}`);

/** Every JSON route outside /api/auth answers `{ status, data, error }`; this returns `data` or throws the error. */
async function api(method: string, path: string, options: { cookie?: string; bearer?: string; json?: unknown } = {}) {
  const res = await fetch(`${BASE}${path}`, {
    method,
    headers: {
      ...(options.json !== undefined ? { 'content-type': 'application/json' } : {}),
      ...(options.cookie ? { cookie: options.cookie } : {}),
      ...(options.bearer ? { authorization: `Bearer ${options.bearer}` } : {}),
    },
    body: options.json !== undefined ? JSON.stringify(options.json) : undefined,
  });
  const body = await res.json();
  return { status: res.status, headers: res.headers, body };
}

async function must(method: string, path: string, options: Parameters<typeof api>[2] = {}) {
  const res = await api(method, path, options);
  if (res.status >= 300) throw new Error(`${method} ${path} answered ${res.status}: ${JSON.stringify(res.body.error ?? res.body)}`);
  return res.body.data;
}

/** Sign-in under /api/auth answers the auth library's own shape; the session is the cookie it sets. */
async function signIn(email: string, password: string): Promise<string> {
  const res = await fetch(`${BASE}/api/auth/sign-in/email`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password }),
  });
  if (res.status !== 200) throw new Error(`sign-in answered ${res.status}: ${await res.text()}`);
  return res.headers
    .getSetCookie()
    .map((c) => c.split(';')[0]!)
    .join('; ');
}

/** Token, refresh and revoke are form posts with the client's credentials (HTTP Basic), per RFC 6749. */
async function tokenEndpoint(path: string, client: { clientId: string; clientSecret: string }, form: Record<string, string>) {
  const res = await fetch(`${BASE}/api/auth/oauth2/${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      authorization: `Basic ${Buffer.from(`${encodeURIComponent(client.clientId)}:${encodeURIComponent(client.clientSecret)}`).toString('base64')}`,
    },
    body: new URLSearchParams(form),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/**
 * Where authorize sends the browser: a 302 for a navigation, or `200 { redirect: true, url }` for a fetch caller
 * (Node's fetch sends `Sec-Fetch-Mode: cors`). Both mean "go there".
 */
async function follow(url: string, cookie: string): Promise<URL> {
  const res = await fetch(url, { headers: { cookie }, redirect: 'manual' });
  if (res.status >= 300 && res.status < 400) return new URL(res.headers.get('location')!, BASE);
  const body = await res.json();
  if (res.status === 200 && body.redirect === true) return new URL(body.url, BASE);
  throw new Error(`authorize answered ${res.status}: ${JSON.stringify(body)}`);
}

export async function quickstart() {
  // ---- 1. The admin sets the agent up ----------------------------------------------------------------------
  step('Admin: sign in, create the agent, a free tier, a metric and its quota');
  const admin = adminCredentials();
  const adminCookie = await signIn(admin.email, admin.password);
  const slug = `quickstart-${randomUUID().slice(0, 8)}`;
  // status "active": a draft agent is invisible to users, and so are its tiers (checkout would answer 404).
  const agent = await must('POST', '/agents', {
    cookie: adminCookie,
    json: { slug, name: 'Quickstart Agent', description: 'Counts API calls', status: 'active', redirectUris: [REDIRECT_URI] },
  });
  // The client secret is shown once, here: the agent's backend keeps it (rotate it with POST /admin/agents/{id}/oauth-client/rotate-secret).
  const client = { clientId: agent.oauthClient.clientId as string, clientSecret: agent.oauthClient.clientSecret as string };
  const tier = await must('POST', `/agents/${agent.id}/pricing`, {
    cookie: adminCookie,
    json: { name: 'Free', priceCents: 0, currency: 'usd', interval: 'month', isPublic: true, features: ['3 API calls a month'] },
  });
  const metric = await must('POST', `/agents/${agent.id}/metric-definitions`, {
    cookie: adminCookie,
    json: { slug: 'api-calls', name: 'API calls', kind: 'rolling', unit: 'call' },
  });
  await must('PUT', `/agents/${agent.id}/pricing/${tier.id}/quotas/${metric.id}`, { cookie: adminCookie, json: { quotaLimit: 3 } });
  console.log(`agent ${agent.id} (client ${client.clientId}), tier ${tier.id}, metric api-calls: 3 a month`);

  // ---- 2. A user signs up, subscribes, and lets the agent act for them ---------------------------------------
  step('User: sign up, sign in, subscribe to the free tier');
  const email = `quickstart-${randomUUID().slice(0, 8)}@example.com`;
  const password = `pw-${randomUUID()}`;
  const signUp = await fetch(`${BASE}/api/auth/sign-up/email`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password, name: 'Quickstart User' }),
  });
  if (signUp.status !== 200) throw new Error(`sign-up answered ${signUp.status}: ${await signUp.text()}`);
  const userCookie = await signIn(email, password);
  const checkout = await must('POST', '/me/checkout', { cookie: userCookie, json: { tierId: tier.id } });
  console.log(`subscription ${checkout.subscription.id}: ${checkout.subscription.status}`);

  step('Browser: authorize with PKCE, consent, back at the agent with a code');
  const verifier = randomBytes(32).toString('base64url');
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const state = randomBytes(16).toString('base64url');
  const authorize = new URL(`${BASE}/api/auth/oauth2/authorize`);
  authorize.search = new URLSearchParams({
    response_type: 'code',
    client_id: client.clientId,
    redirect_uri: REDIRECT_URI,
    scope: 'openid profile email offline_access',
    state,
    code_challenge: challenge,
    code_challenge_method: 'S256',
  }).toString();
  let landing = await follow(authorize.href, userCookie);
  if (landing.pathname === '/consent') {
    // The marketplace's consent page would show the agent's name and the scopes; "Allow" posts this.
    const consent = await fetch(`${BASE}/api/auth/oauth2/consent`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', cookie: userCookie, origin: BASE },
      body: JSON.stringify({ accept: true, consent_code: landing.searchParams.get('consent_code') }),
    });
    const body = await consent.json();
    if (consent.status !== 200) throw new Error(`consent answered ${consent.status}: ${JSON.stringify(body)}`);
    landing = new URL(body.url);
  }
  if (landing.searchParams.get('state') !== state) throw new Error('state mismatch: not our authorization request');
  const code = landing.searchParams.get('code')!;
  console.log(`landed on ${landing.origin}${landing.pathname} with a code`);

  // ---- 3. The agent's backend ----------------------------------------------------------------------------------
  step('Agent backend: exchange the code (with the PKCE verifier) for tokens');
  const tokens = await tokenEndpoint('token', client, { grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI, code_verifier: verifier });
  if (tokens.status !== 200) throw new Error(`token answered ${tokens.status}: ${JSON.stringify(tokens.body)}`);
  let accessToken: string = tokens.body.access_token;
  console.log(`access token for ${tokens.body.expires_in} s, scope "${tokens.body.scope}", refresh token: ${tokens.body.refresh_token ? 'yes' : 'no'}`);

  step('Agent backend: check-and-increment, one clientReqId per action');
  const usagePath = `/me/usage/${agent.id}/api-calls/increment`;
  const firstKey = randomUUID();
  const first = await api('POST', usagePath, { bearer: accessToken, json: { clientReqId: firstKey, amount: 1 } });
  console.log(`${first.status}: used ${first.body.data.used} of ${first.body.data.limit}, X-Quota-Remaining ${first.headers.get('x-quota-remaining')}`);

  // A retry after a timeout sends the same clientReqId: nothing is counted twice, and the answer says it is a replay.
  const replay = await api('POST', usagePath, { bearer: accessToken, json: { clientReqId: firstKey, amount: 1 } });
  console.log(`replay ${replay.status}: replayed ${replay.body.data.replayed}, X-Idempotent-Replay ${replay.headers.get('x-idempotent-replay')}, used ${replay.body.data.used}`);
  if (!replay.body.data.replayed || replay.body.data.used !== 1) throw new Error('the replay counted again');

  step('Agent backend: spend the quota, then handle the 429');
  await must('POST', usagePath, { bearer: accessToken, json: { clientReqId: randomUUID(), amount: 2 } });
  const denied = await api('POST', usagePath, { bearer: accessToken, json: { clientReqId: randomUUID(), amount: 1 } });
  if (denied.status !== 429 || denied.body.error.code !== 'QUOTA_EXCEEDED') throw new Error(`expected 429 QUOTA_EXCEEDED, got ${denied.status}`);
  // QUOTA_EXCEEDED is not RATE_LIMITED: retrying soon does not help. Tell the user when the quota resets.
  const { used, limit, periodEnd } = denied.body.error.details;
  console.log(`429 QUOTA_EXCEEDED: ${used} of ${limit} used; resets at ${periodEnd} (Retry-After ${denied.headers.get('retry-after')} s)`);

  step('Agent backend: refresh the access token (the refresh token rotates: keep the new one)');
  const refreshed = await tokenEndpoint('token', client, { grant_type: 'refresh_token', refresh_token: tokens.body.refresh_token });
  if (refreshed.status !== 200) throw new Error(`refresh answered ${refreshed.status}: ${JSON.stringify(refreshed.body)}`);
  accessToken = refreshed.body.access_token;
  const usage = await must('GET', `/me/usage/${agent.id}/api-calls`, { bearer: accessToken });
  console.log(`with the new access token: used ${usage.used}, remaining ${usage.remaining}`);

  step('Agent backend: the user disconnects: revoke the refresh token');
  const revoked = await tokenEndpoint('revoke', client, { token: refreshed.body.refresh_token, token_type_hint: 'refresh_token' });
  const afterRevoke = await tokenEndpoint('token', client, { grant_type: 'refresh_token', refresh_token: refreshed.body.refresh_token });
  console.log(`revoke ${revoked.status}; refreshing with it now answers ${afterRevoke.status} ${afterRevoke.body?.error}`);
  // A refresh token is good once. Presenting a used one again (a stolen copy, or a backend that lost the new one)
  // is refused and, as a theft defence, ends every token of that grant: store the new refresh token before using it.
  const reused = await tokenEndpoint('token', client, { grant_type: 'refresh_token', refresh_token: tokens.body.refresh_token });
  console.log(`the first refresh token, used again: ${reused.status} ${reused.body?.error}`);

  return { agentId: agent.id, used: usage.used, deniedStatus: denied.status, reusedStatus: reused.status, afterRevokeStatus: afterRevoke.status };
}

if (import.meta.main) {
  quickstart().then(
    () => console.log('\nQuickstart finished.'),
    (err) => {
      console.error(`\nQuickstart failed: ${err.message}`);
      process.exit(1);
    },
  );
}
