import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, buyPaidTier, paidTier, startBillingWorld, type BillingWorld } from '../billing/support.ts';

/**
 * The pages the service serves itself when there is no FRONTEND_URL (functions/http/built-in-pages.ts), beyond the
 * OAuth ones (tests/oauth/frontend-pages.test.ts): every link the service sends (the reset and invitation mails,
 * Stripe's default return addresses) opens one of them, each under a nonce-only CSP, unframeable, escaping what it
 * shows of the query; with FRONTEND_URL none is served. What their scripts do is in tests/browser/built-in-pages.pg-only.test.ts.
 */

const PAGES = [
  '/reset-password',
  '/reset-password?token=abc',
  '/reset-password?error=INVALID_TOKEN',
  '/accept-invitation?id=abc',
  '/checkout/success?session_id=cs_test_abc',
  '/checkout/canceled',
  '/account/billing',
];

const SCRIPT = '<script>alert(1)</script>';

describe('without FRONTEND_URL', () => {
  let w: BillingWorld;
  let t: TestApp;
  beforeAll(async () => {
    w = await startBillingWorld();
    t = w.t;
  });
  afterAll(() => w?.close());

  it('each page answers 200 HTML under a nonce-only CSP, refuses framing, and runs no script without the nonce', async () => {
    for (const path of PAGES) {
      const res = await t.http.get(path);
      expect(res.status, path).toBe(200);
      expect(res.headers.get('content-type'), path).toMatch(/^text\/html/);
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp, path).toContain("default-src 'none'");
      expect(csp, path).toContain("frame-ancestors 'none'");
      expect(res.headers.get('x-frame-options'), path).toBe('DENY');
      expect(res.headers.get('referrer-policy'), path).toBe('no-referrer');
      expect(res.headers.get('cache-control'), path).toBe('no-store');
      const nonce = /script-src 'nonce-([^']+)'/.exec(csp)?.[1];
      const scripts = [...res.text.matchAll(/<script\b[^>]*>/g)].map((m) => m[0]);
      if (path !== '/checkout/canceled') expect(nonce, path).toBeTruthy();
      for (const tag of scripts) expect(tag, path).toBe(`<script nonce="${nonce}">`);
      // no inline handlers or script URLs, which a nonce does not cover (the CSP would block them: none is needed)
      expect(res.text, path).not.toMatch(/\son[a-z]+\s*=|javascript:/i);
    }
  });

  it('attack: a <script> in the link is shown escaped, never as markup', async () => {
    const q = encodeURIComponent(`${SCRIPT}"'`);
    const reset = await t.http.get(`/reset-password?token=${q}&error=${q}`);
    expect(reset.status).toBe(200);
    expect(reset.text).toContain('data-token="&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;"');
    const invitation = await t.http.get(`/accept-invitation?id=${q}`);
    expect(invitation.status).toBe(200);
    expect(invitation.text).toContain('data-invitation-id="&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;"');
    // the sign-in link that comes back carries the id URL-encoded, inside an escaped attribute
    expect(invitation.text).toContain('href="/sign-in?next=%2Faccept-invitation%3Fid%3D%253Cscript%253Ealert(1)%253C%252Fscript%253E%2522&#39;"');
    for (const path of [`/reset-password?token=${q}`, `/accept-invitation?id=${q}`, `/checkout/success?session_id=${q}`, `/checkout/canceled?x=${q}`, `/account/billing?x=${q}`]) {
      const res = await t.http.get(path);
      expect(res.status, path).toBeLessThan(500);
      expect(res.text, path).not.toContain(SCRIPT);
    }
  });

  it('a link without the id or checkout session it needs answers a 400 page that says so', async () => {
    for (const path of ['/accept-invitation', '/accept-invitation?id=', '/checkout/success', '/checkout/success?session_id=not-a-session']) {
      const res = await t.http.get(path);
      expect(res.status, path).toBe(400);
      expect(res.headers.get('content-type'), path).toMatch(/^text\/html/);
      expect(res.text, path).toMatch(/not valid/);
    }
  });

  it('the reset mail opens the reset page with its token: with the redirectTo the docs give, and with none', async () => {
    for (const redirectTo of [`${t.baseUrl}/reset-password`, undefined]) {
      const user = await signUp(t);
      const asked = await t.http.post('/api/auth/request-password-reset', { json: { email: user.email, ...(redirectTo ? { redirectTo } : {}) } });
      expect(asked.status).toBe(200);
      const mail = (await mailsTo(t, user.email)).find((m) => /reset/i.test(m.subject))!;
      const link = linkIn(mail);
      const opened = await t.http.get(link.pathname + link.search);
      expect(opened.status).toBe(302);
      const landing = new URL(opened.headers.get('location')!);
      expect(landing.origin + landing.pathname).toBe(`${t.baseUrl}/reset-password`);
      const token = landing.searchParams.get('token')!;
      expect(token).toBeTruthy();
      const page = await t.http.get(landing.pathname + landing.search);
      expect(page.status).toBe(200);
      expect(page.text).toContain(`data-token="${token}"`);
    }
  });

  it('the invitation mail opens the invitation page', async () => {
    const owner = await signUp(t, { verified: true });
    const org = await t.http.post('/api/auth/organization/create', {
      cookie: owner.cookie,
      headers: { origin: t.baseUrl },
      json: { name: 'Pages Co', slug: `pages-${Date.now()}` },
    });
    expect(org.status, org.text).toBe(200);
    const invitee = `invitee-${Date.now()}@example.test`;
    const invited = await t.http.post('/api/auth/organization/invite-member', {
      cookie: owner.cookie,
      headers: { origin: t.baseUrl },
      json: { email: invitee, role: 'member', organizationId: org.body.id },
    });
    expect(invited.status, invited.text).toBe(200);
    const link = linkIn((await mailsTo(t, invitee))[0]!);
    expect(link.origin + link.pathname).toBe(`${t.baseUrl}/accept-invitation`);
    const page = await t.http.get(link.pathname + link.search);
    expect(page.status).toBe(200);
    expect(page.text).toContain(`data-invitation-id="${invited.body.id}"`);
    expect(page.text).toContain('/api/auth/organization/get-invitation');
  });

  it("Stripe's default return addresses open pages: the checkout's success and cancel, the portal's return", async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const buyer = await signUp(t);
    const checkout = await t.http.post('/me/checkout', { cookie: buyer.cookie, json: { tierId: tier.id } });
    expect(checkout.status, checkout.text).toBe(200);
    const { sessionId } = checkout.body.data;
    const session = w.fake.sessions.get(sessionId)!;
    const success = new URL(String(session.success_url).replace('{CHECKOUT_SESSION_ID}', sessionId));
    const canceled = new URL(String(session.cancel_url));
    expect(success.origin).toBe(t.baseUrl);
    expect(canceled.origin).toBe(t.baseUrl);
    const successPage = await t.http.get(success.pathname + success.search);
    expect(successPage.status).toBe(200);
    expect(successPage.text).toContain(`data-session-id="${sessionId}"`);
    const canceledPage = await t.http.get(canceled.pathname + canceled.search);
    expect(canceledPage.status).toBe(200);
    expect(canceledPage.text).toContain('nothing was charged');

    const customer = await signUp(t);
    await buyPaidTier(w, customer, tier.id);
    const portal = await t.http.post('/me/billing-portal', { cookie: customer.cookie, headers: { origin: t.baseUrl }, json: { flow: 'overview' } });
    expect(portal.status, portal.text).toBe(200);
    const portalSession = [...w.fake.portalSessions.values()].find((s) => s.url === portal.body.data.url)!;
    const back = new URL(String(portalSession.return_url));
    expect(back.origin + back.pathname).toBe(`${t.baseUrl}/account/billing`);
    expect((await t.http.get(back.pathname)).status).toBe(200);
  });

  it('attack: the sign-in page comes back to a built-in page that needs a session, and nowhere else', async () => {
    const continues = async (next: string) =>
      /data-continue="([^"]*)"/.exec((await t.http.get(`/sign-in?next=${encodeURIComponent(next)}`)).text)?.[1];
    expect(await continues('/accept-invitation?id=abc')).toBe('/accept-invitation?id=abc');
    expect(await continues('/checkout/success?session_id=cs_test_1')).toBe('/checkout/success?session_id=cs_test_1');
    expect(await continues('/account/billing')).toBe('/account/billing');
    for (const elsewhere of [
      'https://evil.example/account/billing',
      '//evil.example/account/billing',
      '/\\evil.example/account/billing',
      '/api/auth/sign-out',
      '/account/billing/../../api/auth/sign-out',
      'javascript:alert(1)',
    ]) {
      expect(await continues(elsewhere), elsewhere).toBe('');
    }
    // the sign-up page, reached from the sign-in page's link, comes back too
    const signUpPage = await t.http.get(`/sign-up?next=${encodeURIComponent('/account/billing')}`);
    expect(signUpPage.text).toContain('data-continue="/account/billing"');
  });

  it('the sign-in page links to the reset page', async () => {
    const page = await t.http.get('/sign-in');
    expect(page.text).toContain('<a id="forgot" href="/reset-password">');
  });
});

describe('with FRONTEND_URL', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ env: { FRONTEND_URL: 'https://market.example' } });
  });
  afterAll(() => t?.close());

  it('none of these pages is served: the front end has its own (404 NOT_FOUND)', async () => {
    for (const path of [...PAGES, '/claim?token=abc']) {
      const res = await t.http.get(path);
      expect(res.status, path).toBe(404);
      expect(res.body.error.code, path).toBe('NOT_FOUND');
    }
  });

  it('the reset mail without redirectTo lands on the front end\'s reset page', async () => {
    const user = await signUp(t);
    expect((await t.http.post('/api/auth/request-password-reset', { json: { email: user.email } })).status).toBe(200);
    const mail = (await mailsTo(t, user.email)).find((m) => /reset/i.test(m.subject))!;
    const link = linkIn(mail);
    const opened = await t.http.get(link.pathname + link.search);
    expect(opened.status).toBe(302);
    const landing = new URL(opened.headers.get('location')!);
    expect(landing.origin + landing.pathname).toBe('https://market.example/reset-password');
    expect(landing.searchParams.get('token')).toBeTruthy();
  });
});
