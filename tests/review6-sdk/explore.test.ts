import { createMeter, createOAuth, type TokenSet } from '@agent-marketplace/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { clientOfAgent, followAuthorize, type TestOAuthClient } from '../support/oauth.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { meteredAgent, subscribe, type MeteredAgent } from '../metering/support.ts';

let t: TestApp;
let user: TestUser;
let agent: MeteredAgent;
let oauthClient: TestOAuthClient;

beforeAll(async () => {
  t = await startTestApp();
  user = await signUp(t);
  agent = await meteredAgent(t.db, [{ slug: 'calls', kind: 'rolling', quota: 5 }, { slug: 'seats', kind: 'fixed', quota: 3 }]);
  oauthClient = await clientOfAgent(t, agent.agentId);
  await subscribe(t, user.userId, agent.tierId);
});
afterAll(() => t?.close());

const signInFor = () =>
  createOAuth({ issuer: `${t.baseUrl}/api/auth`, clientId: oauthClient.clientId, clientSecret: oauthClient.clientSecret, redirectUri: oauthClient.redirectUri, allowInsecureHttp: true });

async function browser(url: string): Promise<URL> {
  const target = new URL(url);
  let landing = await followAuthorize(t, `${target.pathname}${target.search}`, user.cookie);
  if (landing.pathname === '/consent') {
    const consent = await t.http.post('/api/auth/oauth2/consent', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: { accept: true, consent_code: landing.searchParams.get('consent_code') } });
    landing = new URL(consent.body.url);
  }
  return landing;
}
async function signedIn(): Promise<TokenSet> {
  const signIn = signInFor();
  const { url, state, codeVerifier } = await signIn.authorizationUrl();
  return signIn.exchangeCode(await browser(url), { state, codeVerifier });
}

it('explore', async () => {
  const tokens = await signedIn();
  console.log('tokens', { ...tokens, accessToken: tokens.accessToken.slice(0, 10) });
  const meter = createMeter({ baseUrl: t.baseUrl, agentId: agent.agentId, accessToken: tokens.accessToken });
  const inc = await meter.increment('calls', { amount: 5 });
  console.log('inc', inc);
  const denied = await meter.increment('calls').catch((e) => e);
  console.log('denied', denied, denied.details, denied.retryAfterSeconds);
  const key = 'k-' + Date.now();
  const d1 = await meter.increment('seats', { clientReqId: key, amount: 3 }).catch((e) => e);
  const d2 = await meter.increment('seats', { clientReqId: key + 'x' }).catch((e) => e);
  const d3 = await meter.increment('seats', { clientReqId: key + 'x' }).catch((e) => e);
  console.log('d', d1.quota, d2.details, d3.details, d3.replayed);
  const r = await meter.reserve('seats', { amount: 1 }).catch((e) => e);
  console.log('reserve denied', r.status, r.details);
  const dec = await meter.decrement('seats', { clientReqId: 'dec-' + key });
  const dec2 = await meter.decrement('seats', { clientReqId: 'dec-' + key });
  console.log('dec', dec, dec2);
  const bad = await createMeter({ baseUrl: t.baseUrl, agentId: agent.agentId, accessToken: 'nope' }).increment('calls').catch((e) => e);
  console.log('401', bad, bad.details);
  const nf = await meter.increment('nope').catch((e) => e);
  console.log('404', nf.constructor.name, nf.details);
  const rc = await meter.commit(crypto.randomUUID(), 1).catch((e) => e);
  console.log('404r', rc.constructor.name, rc.details);
  const hold = await meter.reserve('seats', { amount: 1, ttlSeconds: 1 });
  await new Promise((r) => setTimeout(r, 1500));
  const late = await meter.commit(hold.data.id, 1).catch((e) => e);
  console.log('422', late.constructor.name, late.code, late.status);
  const neg = await meter.increment('calls', { amount: 0 }).catch((e) => e);
  console.log('400', neg.constructor.name, neg.code, neg.details);
});
