import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { launchChromiumProfile, screenshot } from '../support/browser.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import { signUp, verifyEmail, type TestUser } from '../support/users.ts';
import { activeAgent, buyPaidTier, paidTier, startBillingWorld, type BillingWorld } from '../billing/support.ts';

/**
 * The built-in pages a deployment without FRONTEND_URL sends people to, used in a real browser (headless Debian
 * Chromium, driven by playwright-core) as a newcomer would: the password reset from "Forgot your password?" to
 * signing in with the new password, an organization invitation opened signed out, and the pages Stripe returns
 * buyers to. Mailed links are read from the outbox, as the newcomer reads them from .data/mail/. A screenshot of
 * each page is saved under .test-artifacts/.
 */

let w: BillingWorld;
let browser: BrowserContext;
let closeBrowser: (() => Promise<void>) | undefined;

beforeAll(async () => {
  w = await startBillingWorld();
  ({ context: browser, close: closeBrowser } = await launchChromiumProfile());
});

afterAll(async () => {
  await closeBrowser?.();
  await w?.close();
});

/** A new tab; signed in as `user` when given (the session cookie a sign-in gave the test), else signed out. */
async function freshPage(user?: TestUser): Promise<Page> {
  await browser.clearCookies();
  if (user) {
    const cookies = user.cookie.split('; ').map((pair) => {
      const at = pair.indexOf('=');
      return { name: pair.slice(0, at), value: pair.slice(at + 1), url: w.t.baseUrl };
    });
    await browser.addCookies(cookies);
  }
  return browser.newPage();
}

const visible = (page: Page, selector: string) => expect.poll(() => page.isVisible(selector)).toBe(true);

test('forgot password: ask for a link on the built-in page, open the mailed link, set a new password, sign in with it', async () => {
  const user = await signUp(w.t);
  const page = await freshPage();
  await page.goto(`${w.t.baseUrl}/sign-in`);
  await page.click('#forgot');
  await page.waitForURL((url) => url.pathname === '/reset-password');
  await page.fill('#email', user.email);
  await screenshot(page, 'reset-1-ask.png');
  await page.click('#request');
  await visible(page, '#requested');

  const mail = (await mailsTo(w.t, user.email)).find((m) => /reset/i.test(m.subject));
  expect(mail).toBeDefined();
  const link = linkIn(mail!);
  await page.goto(link.href);
  await page.waitForURL((url) => url.pathname === '/reset-password');
  await visible(page, '#new-password');
  // the token left the address bar (and the history) as soon as the page ran
  expect(new URL(page.url()).search).toBe('');
  await screenshot(page, 'reset-2-new-password.png');

  // a password the library refuses: its own words, and nothing changed
  await page.fill('#new-password', 'short');
  await page.click('#save');
  await expect.poll(() => page.textContent('#status')).toMatch(/password too short/i);
  await page.fill('#new-password', 'a brand new password 1');
  await page.click('#save');
  await visible(page, '#done');
  await screenshot(page, 'reset-3-done.png');

  await page.click('#sign-in');
  await page.waitForURL((url) => url.pathname === '/sign-in');
  await page.fill('#email', user.email);
  await page.fill('#password', 'a brand new password 1');
  await page.click('#submit');
  await expect.poll(() => page.textContent('#status')).toBe('You are signed in.');
  const me = await page.evaluate(() => fetch('/me').then((r) => r.json()));
  expect(me.data.email).toBe(user.email);
  expect((await w.t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password: user.password } })).status).toBe(401);

  // The same link again: the library refuses it, and the page says why and offers a new one.
  await page.goto(link.href);
  await page.waitForURL((url) => url.pathname === '/reset-password');
  await visible(page, '#request-form');
  expect(await page.textContent('#request-intro')).toMatch(/no longer works/);
  await screenshot(page, 'reset-4-link-used.png');
});

test('invitation: opened signed out, the page signs the invitee in and comes back; unverified it shows the refusal; verified it accepts', async () => {
  const owner = await signUp(w.t, { verified: true });
  const invitee = await signUp(w.t);
  const org = await w.t.http.post('/api/auth/organization/create', {
    cookie: owner.cookie,
    headers: { origin: w.t.baseUrl },
    // Its own double quotes cannot close the page's quotes around it (review 120): shown as single ones.
    json: { name: 'Browser "Org"', slug: `browser-org-${Date.now()}` },
  });
  expect(org.status, org.text).toBe(200);
  const invited = await w.t.http.post('/api/auth/organization/invite-member', {
    cookie: owner.cookie,
    headers: { origin: w.t.baseUrl },
    json: { email: invitee.email, role: 'member', organizationId: org.body.id },
  });
  expect(invited.status, invited.text).toBe(200);
  const link = linkIn((await mailsTo(w.t, invitee.email)).find((m) => /invited/i.test(m.subject))!);

  const page = await freshPage();
  await page.goto(link.href);
  await visible(page, '#signed-out');
  await page.click('#sign-in');
  await page.waitForURL((url) => url.pathname === '/sign-in');
  await page.fill('#email', invitee.email);
  await page.fill('#password', invitee.password);
  await page.click('#submit');
  await page.waitForURL((url) => url.pathname === '/accept-invitation');
  // not verified yet: the library's refusal, as it says it
  const refusal = await w.t.http.get(`/api/auth/organization/get-invitation?id=${invited.body.id}`, { cookie: invitee.cookie });
  expect(refusal.status).toBe(403);
  await expect.poll(() => page.textContent('#status')).toBe(refusal.body.message);
  await visible(page, '#verify-first');
  await screenshot(page, 'invitation-1-unverified.png');

  await verifyEmail(w.t, invitee.email);
  await page.reload();
  await visible(page, '#accept');
  expect(await page.textContent('#summary')).toContain(`"Browser 'Org'" as member`);
  await screenshot(page, 'invitation-2-shown.png');
  await page.click('#accept');
  await expect.poll(() => page.textContent('#outcome')).toBe(`You are now a member of "Browser 'Org'".`);
  const member = await first<{ role: string }>(
    w.t.db,
    sql`select role from member where "organizationId" = ${org.body.id} and "userId" = ${invitee.userId}`,
  );
  expect(member?.role).toBe('member');
});

test('an anonymous buyer back from Stripe finishes the purchase with a click, and is told where the account is', async () => {
  const agent = await activeAgent(w);
  const tier = await paidTier(w, agent.id);
  const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
  expect(start.status).toBe(200);
  const { sessionId } = start.body.data;
  const email = `browser-buyer-${Date.now()}@example.test`;
  w.fake.completeCheckout(sessionId, { email, name: 'Browser Buyer' });
  w.fake.takeEvents(); // the success page places the purchase, not the webhook

  const page = await freshPage();
  const success = new URL(String(w.fake.sessions.get(sessionId)!.success_url).replace('{CHECKOUT_SESSION_ID}', sessionId));
  await page.goto(success.href);
  await visible(page, '#complete');
  // nothing happened on load: no account yet
  expect(await first(w.t.db, sql`select id from "user" where email = ${email}`)).toBeUndefined();
  await screenshot(page, 'checkout-1-anonymous.png');
  await page.click('#complete');
  await expect.poll(() => page.textContent('#outcome')).toBe(
    `Your payment went through. Your subscription is active. We made an account for ${email} and mailed that address a link to choose its password.`,
  );
  const setPassword = (await mailsTo(w.t, email)).find((m) => /reset/i.test(m.subject))!;
  expect(linkIn(setPassword).searchParams.get('callbackURL')).toBe(`${w.t.baseUrl}/reset-password`);
});

test('a signed-in buyer: the billing page first says there is no billing account; after paying, the success page says so and the portal opens', async () => {
  const buyer = await signUp(w.t);
  const page = await freshPage(buyer);
  await page.goto(`${w.t.baseUrl}/account/billing`);
  await visible(page, '#portal');
  expect(await page.textContent('#who')).toBe(`Signed in as ${buyer.email}.`);
  await page.click('#portal');
  await expect.poll(() => page.textContent('#status')).toBe('No billing account yet: the billing portal opens after your first paid purchase.');

  const agent = await activeAgent(w);
  const tier = await paidTier(w, agent.id);
  const { sessionId } = await buyPaidTier(w, buyer, tier.id);
  await page.goto(`${w.t.baseUrl}/checkout/success?session_id=${sessionId}`);
  await expect.poll(() => page.textContent('#outcome')).toBe('Your payment went through. Your subscription is active.');
  await screenshot(page, 'checkout-2-signed-in.png');

  await page.goto(`${w.t.baseUrl}/account/billing`);
  await visible(page, '#portal');
  await page.click('#portal');
  await page.waitForURL((url) => url.href.startsWith(`${w.fake.url}/portal/`));

  // signed out, the billing page offers the sign-in page, which comes back to it
  const signedOut = await freshPage();
  await signedOut.goto(`${w.t.baseUrl}/account/billing`);
  await visible(signedOut, '#sign-in');
  await signedOut.click('#sign-in');
  await signedOut.waitForURL((url) => url.pathname === '/sign-in');
  await signedOut.fill('#email', buyer.email);
  await signedOut.fill('#password', buyer.password);
  await signedOut.click('#submit');
  await signedOut.waitForURL((url) => url.pathname === '/account/billing');
  await visible(signedOut, '#portal');
});
