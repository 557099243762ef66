import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { agentBackend } from '../../examples/agent-backend/app.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { clientOfAgent, landingAfterConsent, type TestOAuthClient } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { meteredAgent, subscribe, type MeteredAgent } from '../metering/support.ts';

/**
 * The example agent backend (examples/agent-backend/app.ts) keeps its own users safe, since backends copy it (review
 * 28): driven in process (app.fetch) at its public URL, against the real service. The browser walk-through of the same
 * app is tests/browser/example-agent-backend.pg-only.test.ts.
 */
let t: TestApp;
let agent: MeteredAgent;
let oauthClient: TestOAuthClient;
const PUBLIC_URL = 'http://127.0.0.1:9'; // the test clients' registered callback origin

beforeAll(async () => {
  t = await startTestApp();
  agent = await meteredAgent(t.db, [{ slug: 'summaries', kind: 'rolling', quota: 5 }]);
  oauthClient = await clientOfAgent(t, agent.agentId);
});
afterAll(() => t?.close());

const backend = (publicUrl = PUBLIC_URL) =>
  agentBackend({ marketplaceUrl: t.baseUrl, agentId: agent.agentId, clientId: oauthClient.clientId, clientSecret: oauthClient.clientSecret, publicUrl, metric: 'summaries' });
type App = ReturnType<typeof backend>;

/** A request to the example; `cookies` is the browser's cookie jar (updated from the answer's Set-Cookie). */
async function call(app: App, path: string, cookies: Map<string, string>, init: { method?: string; headers?: Record<string, string>; form?: Record<string, string> } = {}) {
  const cookie = [...cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  const res = await app.fetch(
    new Request(new URL(path, PUBLIC_URL), {
      method: init.method ?? 'GET',
      headers: { ...(cookie ? { cookie } : {}), ...init.headers },
      ...(init.form ? { body: new URLSearchParams(init.form) } : {}),
      redirect: 'manual',
    }),
  );
  for (const set of res.headers.getSetCookie()) {
    const [pair] = set.split(';');
    const [name, value] = [pair!.slice(0, pair!.indexOf('=')), pair!.slice(pair!.indexOf('=') + 1)];
    if (value && !/max-age=0/i.test(set)) cookies.set(name, value);
    else cookies.delete(name);
  }
  return res;
}

/** The Summarize action a page offers (its form's hidden clientReqId). */
const actionOf = (pageHtml: string): string => /name="action" value="([^"]+)"/.exec(pageHtml)![1]!;

/** The user presses Summarize on the page the example just served them (a form post of its own page). */
async function summarize(app: App, jar: Map<string, string>, headers: Record<string, string> = {}) {
  const action = actionOf(await (await call(app, '/', jar)).text());
  return call(app, '/summarize', jar, { method: 'POST', headers, form: { action } });
}

/** The marketplace side of a sign-in: authorize with the user's cookie, consent (or deny); the callback URL. */
const marketplace = (authorizeUrl: string, user: TestUser, accept = true): Promise<URL> => landingAfterConsent(t, authorizeUrl, user, accept);

async function subscribedUser(): Promise<TestUser> {
  const user = await signUp(t);
  await subscribe(t, user.userId, agent.tierId);
  return user;
}

async function signInAt(app: App, jar: Map<string, string>, user: TestUser) {
  const login = await call(app, '/login', jar);
  expect(login.status).toBe(302);
  const landing = await marketplace(login.headers.get('location')!, user);
  return call(app, `${landing.pathname}${landing.search}`, jar);
}

describe('its sessions', () => {
  it("attack: cookies the backend hands an attacker, planted in the victim's browser before sign-in, do not become the victim's session", async () => {
    const app = backend();
    const attacker = new Map<string, string>();
    await call(app, '/', attacker);
    await call(app, '/login', attacker); // whatever the backend gives a visitor before sign-in
    const victim = new Map(attacker); // planted (a sibling subdomain, plain http)
    expect((await signInAt(app, victim, await subscribedUser())).status).toBe(302);
    expect(await (await call(app, '/', victim)).text()).toContain('Signed in');
    expect(await (await call(app, '/', attacker)).text()).not.toContain('Signed in');
  });

  it('a visitor gets no session (nothing kept per request), and on https the cookies are Secure with the __Host- prefix', async () => {
    const app = backend();
    for (let i = 0; i < 3; i++) expect((await call(app, '/', new Map())).headers.getSetCookie()).toEqual([]);
    const onHttps = backend('https://agent.example');
    const login = await onHttps.fetch(new Request('https://agent.example/login', { redirect: 'manual' }));
    const [signInCookie] = login.headers.getSetCookie();
    expect(signInCookie).toMatch(/^__Host-agent_sign_in=[^;]+;.*HttpOnly/);
    expect(signInCookie).toMatch(/;\s*Secure/);
  });

  it("attack: another browser's callback (login CSRF) is refused, and a state is used once", async () => {
    const app = backend();
    const attacker = new Map<string, string>();
    const login = await call(app, '/login', attacker);
    const landing = await marketplace(login.headers.get('location')!, await subscribedUser());
    const victim = new Map<string, string>();
    const forced = await call(app, `${landing.pathname}${landing.search}`, victim);
    expect(forced.status).toBe(400);
    expect(victim.has('agent_session')).toBe(false);
    // the sign-in is the browser's that started it: there it finishes (its own account), once
    expect((await call(app, `${landing.pathname}${landing.search}`, attacker)).status).toBe(302);
    expect((await call(app, `${landing.pathname}${landing.search}`, attacker)).status).toBe(400);
  });

  it('attack: an anonymous visitor requesting /login 10,000 times does not push out a real sign-in in progress (review 41)', async () => {
    // The sign-ins in progress were kept on the server, 10,000 at most for every visitor together.
    const app = backend();
    const jar = new Map<string, string>();
    const login = await call(app, '/login', jar);
    const landing = await marketplace(login.headers.get('location')!, await subscribedUser());
    for (let i = 0; i < 10_000; i++) await app.fetch(new Request(new URL('/login', PUBLIC_URL), { redirect: 'manual' }));
    const callback = await call(app, `${landing.pathname}${landing.search}`, jar);
    expect([callback.status, callback.headers.get('location')]).toEqual([302, '/']);
  }, 60_000);

  it("attack: another site's form cannot spend the user's quota or sign them out", async () => {
    const app = backend();
    const jar = new Map<string, string>();
    await signInAt(app, jar, await subscribedUser());
    for (const headers of [{ origin: 'https://evil.example' }, { 'sec-fetch-site': 'same-site' }] as Array<Record<string, string>>) {
      expect((await call(app, '/summarize', jar, { method: 'POST', headers })).status).toBe(403);
      expect((await call(app, '/logout', jar, { method: 'POST', headers })).status).toBe(403);
    }
    expect(await (await call(app, '/', jar)).text()).toContain('5 of 5 left');
    const own = await summarize(app, jar, { origin: 'http://127.0.0.1:9', 'sec-fetch-site': 'same-origin' });
    expect(await own.text()).toContain('Summary written (call 1)');
  });
});

describe('what a user meets', () => {
  it('a denied consent is a page saying so, not a 500', async () => {
    const app = backend();
    const jar = new Map<string, string>();
    const login = await call(app, '/login', jar);
    const landing = await marketplace(login.headers.get('location')!, await subscribedUser(), false);
    expect(landing.searchParams.get('error')).toBe('access_denied');
    const callback = await call(app, `${landing.pathname}${landing.search}`, jar);
    expect([callback.status, await callback.text()]).toEqual([200, expect.stringContaining('Sign-in cancelled')]);
  });

  it('a sign-in started in two tabs: both finish', async () => {
    const app = backend();
    const jar = new Map<string, string>();
    const user = await subscribedUser();
    const first = await call(app, '/login', jar);
    const second = await call(app, '/login', jar);
    for (const login of [first, second]) {
      const landing = await marketplace(login.headers.get('location')!, user);
      expect((await call(app, `${landing.pathname}${landing.search}`, jar)).status).toBe(302);
    }
    expect(await (await call(app, '/', jar)).text()).toContain('Signed in');
  });

  it('a user whose subscription ended is told to subscribe, not answered 500, and can sign out', async () => {
    const app = backend();
    const jar = new Map<string, string>();
    const user = await subscribedUser();
    expect((await signInAt(app, jar, user)).status).toBe(302);
    const action = actionOf(await (await call(app, '/', jar)).text()); // the page open before the subscription ended
    const cancel = await t.http.post(`/me/subscriptions/${agent.agentId}/cancel`, { cookie: user.cookie, headers: { origin: t.baseUrl } });
    expect(cancel.status, cancel.text).toBe(200);
    const home = await call(app, '/', jar);
    expect([home.status, await home.text()]).toEqual([200, expect.stringContaining('no active subscription')]);
    const pressed = await call(app, '/summarize', jar, { method: 'POST', form: { action } });
    expect([pressed.status, await pressed.text()]).toEqual([402, expect.stringContaining('no active subscription')]);
    expect((await call(app, '/logout', jar, { method: 'POST' })).status).toBe(302);
    expect(await (await call(app, '/', jar)).text()).toContain('Sign in with the marketplace');
  });
});

describe('subscribing from the page (review 94)', () => {
  it("a user with no subscription is offered the agent's public tiers and subscribes to the free one there; another site's post is refused", async () => {
    // The page linked to the marketplace's API (GET /agents/{id}: JSON in the browser), where nobody can subscribe.
    const app = backend();
    const jar = new Map<string, string>();
    const user = await signUp(t);
    expect((await signInAt(app, jar, user)).status).toBe(302);
    const home = await (await call(app, '/', jar)).text();
    expect(home).toContain('no active subscription');
    const tierId = /name="tierId" value="([^"]+)"/.exec(home)?.[1];
    expect(tierId).toBe(agent.tierId);
    expect(home).toContain('(free)');
    expect(home).not.toContain('Enterprise'); // contact sales is the marketplace's page, not a checkout

    const forged = await call(app, '/subscribe', jar, { method: 'POST', headers: { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' }, form: { tierId: tierId! } });
    expect(forged.status).toBe(403);
    expect((await t.http.get('/me/subscriptions', { cookie: user.cookie })).body.data).toEqual([]);
    const unnamed = await call(app, '/subscribe', jar, { method: 'POST', form: {} });
    expect([unnamed.status, await unnamed.text()]).toEqual([400, expect.stringContaining('Choose one of the plans')]);

    // A tier of another agent (a tampered form): the marketplace refuses the agent's token (403), the page says so.
    const other = await meteredAgent(t.db, [{ slug: 'summaries', kind: 'rolling', quota: 5 }]);
    const foreign = await call(app, '/subscribe', jar, { method: 'POST', form: { tierId: other.tierId } });
    expect([foreign.status, await foreign.text()]).toEqual([409, expect.stringContaining('did not start this subscription')]);
    const subscribed = await call(app, '/subscribe', jar, { method: 'POST', form: { tierId: tierId! } });
    expect([subscribed.status, subscribed.headers.get('location')]).toEqual([303, '/']);
    expect(await (await call(app, '/', jar)).text()).toContain('5 of 5 left');
    const mine = (await t.http.get('/me/subscriptions', { cookie: user.cookie })).body.data as Array<{ agentId: string; status: string }>;
    expect(mine.map((x) => [x.agentId, x.status])).toEqual([[agent.agentId, 'active']]);
    // Sent again (the back button): the same subscription, not a second one.
    const again = await call(app, '/subscribe', jar, { method: 'POST', form: { tierId: tierId! } });
    expect([again.status, again.headers.get('location')]).toEqual([303, '/']);
    expect((await t.http.get('/me/subscriptions', { cookie: user.cookie })).body.data).toHaveLength(1);
  });
});

describe('the marketplace refusing the backend itself', () => {
  it("its client secret rotated: the user's next page says the Summarizer cannot reach the marketplace, not a 500", async () => {
    // an agent of its own: the rotation would refuse every other test's backend
    const own = await meteredAgent(t.db, [{ slug: 'summaries', kind: 'rolling', quota: 5 }]);
    const ownClient = await clientOfAgent(t, own.agentId);
    const app = agentBackend({ marketplaceUrl: t.baseUrl, agentId: own.agentId, clientId: ownClient.clientId, clientSecret: ownClient.clientSecret, publicUrl: PUBLIC_URL, metric: 'summaries' });
    const jar = new Map<string, string>();
    const user = await signUp(t);
    await subscribe(t, user.userId, own.tierId);
    await signInAt(app, jar, user);
    const admin = await createAdmin(t);
    const rotated = await t.http.post(`/admin/agents/${own.agentId}/oauth-client/rotate-secret`, { cookie: admin.cookie, headers: { origin: t.baseUrl } });
    expect(rotated.status, rotated.text).toBe(200);
    // the user signs out at the marketplace: their token is refused, and the refresh with the old secret too
    const revoked = await t.http.post('/api/auth/revoke-sessions', { cookie: user.cookie, headers: { origin: t.baseUrl }, json: {} });
    expect(revoked.status, revoked.text).toBe(200);
    const home = await call(app, '/', jar);
    expect([home.status, await home.text()]).toEqual([503, expect.stringContaining('cannot reach the marketplace right now')]);
  });
});

/**
 * Review 86: one Summarize is one user action with one clientReqId (the SDK README: after a NetworkError, send the same
 * call again with its clientReqId, never a new one). The example answered a lost answer with a bare 500 and forgot the
 * key, so the user's next click was a new increment: counted twice for one summary.
 */
describe('one Summarize, one count', () => {
  const realFetch = globalThis.fetch;
  afterEach(() => {
    globalThis.fetch = realFetch;
  });
  const used = async (user: TestUser) => (await t.http.get(`/me/usage/${agent.agentId}/summaries`, { cookie: user.cookie })).body.data.used as number;

  it('every answer to the increment lost: the page offers that same action again, which is not counted twice', async () => {
    const app = backend();
    const jar = new Map<string, string>();
    const user = await subscribedUser();
    await signInAt(app, jar, user);
    const action = actionOf(await (await call(app, '/', jar)).text());
    // the network between the backend and the marketplace: every increment reaches the service, every answer is lost
    globalThis.fetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
      const res = await realFetch(input, init);
      if ((input instanceof Request ? input.url : String(input)).endsWith('/summaries/increment')) {
        await res.text();
        throw new TypeError('fetch failed (the connection reset after the request was sent)');
      }
      return res;
    }) as typeof fetch;
    const lost = await call(app, '/summarize', jar, { method: 'POST', form: { action } });
    globalThis.fetch = realFetch;
    const lostPage = await lost.text();
    expect([lost.status, lostPage]).toEqual([503, expect.stringContaining('Trying it again will not count it twice')]);
    expect(actionOf(lostPage)).toBe(action);
    expect(await used(user)).toBe(1); // the marketplace counted it

    const again = await call(app, '/summarize', jar, { method: 'POST', form: { action: actionOf(lostPage) } });
    expect([again.status, await again.text()]).toEqual([200, expect.stringContaining('Summary written (call 1)')]);
    expect(await used(user)).toBe(1);
  }, 60_000);

  it('the same form sent twice (a double click, the back button) writes one summary; an action no page offered is refused', async () => {
    const app = backend();
    const jar = new Map<string, string>();
    const user = await subscribedUser();
    await signInAt(app, jar, user);
    const action = actionOf(await (await call(app, '/', jar)).text());
    const [one, two] = await Promise.all([0, 1].map(() => call(app, '/summarize', jar, { method: 'POST', form: { action } })));
    expect([one!.status, two!.status].sort()).toEqual([200, 409]);
    expect((await call(app, '/summarize', jar, { method: 'POST', form: { action } })).status).toBe(409);
    expect((await call(app, '/summarize', jar, { method: 'POST', form: { action: crypto.randomUUID() } })).status).toBe(409);
    expect((await call(app, '/summarize', jar, { method: 'POST' })).status).toBe(409);
    expect(await used(user)).toBe(1);
  });
});
