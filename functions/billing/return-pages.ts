import type { Context } from 'hono';
import { builtInPage, pageScript, requireBuiltInPages, signInComingBackTo } from '../http/built-in-pages.ts';
import { escapeHtml, randomNonce } from '../http/html.ts';
import type { AppEnv } from '../platform/app-types.ts';
import { CHECKOUT_SESSION_ID } from './checkout.ts';

/**
 * Where Stripe sends buyers back when there is no FRONTEND_URL (http/built-in-pages.ts), at the default return
 * addresses (checkout.ts `checkoutUrls`, portal.ts): /checkout/success?session_id=..., /checkout/canceled and
 * /account/billing. They use the public API as a front end would (docs/billing.md). Outside the OpenAPI document,
 * like /sign-in.
 */

/**
 * GET /checkout/success?session_id=cs_...: a signed-in buyer's own checkout is read with GET /me/checkout/{id} on
 * load (a read), and the page says whether the payment went through. A checkout without an account (no session,
 * or a session the signed-in visitor does not own: GET /me/checkout answers 401 or 404) is completed by a click
 * that posts the id to POST /checkout/anonymous/complete, never on load; its answer is shown: the account made or
 * attached to (200), or "check your mail" (202, an unverified account holds the address).
 */
export function checkoutSuccessPage(c: Context<AppEnv>): Response {
  requireBuiltInPages(c);
  const sessionId = c.req.query('session_id') ?? '';
  if (!CHECKOUT_SESSION_ID.test(sessionId)) {
    return builtInPage(
      c,
      400,
      'Checkout link not valid',
      '<p>This page needs the checkout session that Stripe adds to the link (<code>session_id=cs_...</code>). Open the link Stripe sent you back with.</p>',
    );
  }
  const signIn = signInComingBackTo(`/checkout/success?session_id=${encodeURIComponent(sessionId)}`);
  const nonce = randomNonce();
  const body = `
    <div id="page" data-session-id="${escapeHtml(sessionId)}"></div>
    <p id="loading">Looking up your checkout…</p>
    <p id="outcome" hidden></p>
    <div id="anonymous" hidden>
      <p>Thank you for your purchase. Finish it to get your access: this adds it to the account of the address you
        gave Stripe (or makes one).</p>
      <button type="button" id="complete">Finish my purchase</button>
      <p>Bought while signed in? <a id="sign-in" href="${escapeHtml(signIn)}">Sign in</a> to see it.</p>
    </div>
    <p id="next" hidden><a href="/account/billing">Your billing</a></p>
    <p id="status" role="status"></p>
    ${pageScript(
      nonce,
      `
      const sessionId = $('page').dataset.sessionId;
      const tell = (text) => {
        $('outcome').textContent = text;
        $('outcome').hidden = false;
      };
      const subscriptionText = (subscription) =>
        !subscription
          ? ' Your subscription appears in a moment, as soon as Stripe tells us about it.'
          : subscription.status === 'active'
            ? ' Your subscription is active.'
            : ' Your subscription starts once the payment is through (now: ' + subscription.status + ').';
      const checkoutText = (checkout) => {
        const paid = checkout.paymentStatus === 'paid' || checkout.paymentStatus === 'no_payment_required';
        if (checkout.status === 'complete' && paid) return 'Your payment went through.' + subscriptionText(checkout.subscription);
        if (checkout.status === 'complete') return 'Your payment is still being processed: nothing is active yet. Look again in a little while.';
        if (checkout.status === 'expired') return 'This checkout expired: nothing was charged.';
        return 'This checkout is not paid: nothing was charged.';
      };
      $('complete').addEventListener('click', async () => {
        say('');
        $('complete').disabled = true;
        const res = await api('POST', '/checkout/anonymous/complete', { sessionId }, 'omit');
        if (!res.ok) {
          $('complete').disabled = false;
          say(res.message);
          return;
        }
        $('anonymous').hidden = true;
        if (res.status === 202) {
          tell('Your payment went through. Check your mail: an account with this address exists but was never ' +
            'confirmed, so we mailed the address a link that confirms it and adds the purchase to the account.');
          return;
        }
        const { user, subscription, created } = res.data;
        tell(created
          ? 'Your payment went through.' + subscriptionText(subscription) + ' We made an account for ' + user.email +
            ' and mailed that address a link to choose its password.'
          : 'Your payment went through.' + subscriptionText(subscription) + ' The purchase is part of the account ' +
            user.email + ' now: sign in to use it.');
      });
      (async () => {
        const res = await api('GET', '/me/checkout/' + encodeURIComponent(sessionId));
        $('loading').hidden = true;
        if (res.status === 401 || res.status === 404) {
          $('anonymous').hidden = false;
          return;
        }
        if (!res.ok) {
          say(res.message);
          return;
        }
        tell(checkoutText(res.data));
        $('next').hidden = false;
      })();`,
    )}`;
  return builtInPage(c, 200, 'Your purchase', body, { nonce });
}

/** GET /checkout/canceled: where Stripe sends a buyer who leaves the checkout. */
export function checkoutCanceledPage(c: Context<AppEnv>): Response {
  requireBuiltInPages(c);
  return builtInPage(
    c,
    200,
    'Checkout canceled',
    `<p id="outcome">You left the checkout: nothing was charged, and nothing changed on your account.</p>
    <p><a id="back" href="/account/billing">Back to your billing</a></p>`,
  );
}

/**
 * GET /account/billing: where Stripe's customer portal returns to. Signed in (GET /me on load), a button posts
 * `{ flow: "overview" }` to POST /me/billing-portal and goes to the portal it answers; 422 (no Stripe customer yet)
 * is said as such. Signed out, a link to the sign-in page, which comes back here.
 */
export function accountBillingPage(c: Context<AppEnv>): Response {
  requireBuiltInPages(c);
  const nonce = randomNonce();
  const body = `
    <p id="loading">Looking up your account…</p>
    <p id="signed-out" hidden>Sign in to see your billing. <a id="sign-in" href="${escapeHtml(signInComingBackTo('/account/billing'))}">Sign in</a></p>
    <div id="signed-in" hidden>
      <p id="who"></p>
      <p>Invoices, payment methods and paid subscriptions are on Stripe's billing portal.</p>
      <button type="button" id="portal">Open the billing portal</button>
    </div>
    <p id="status" role="status"></p>
    ${pageScript(
      nonce,
      `
      $('portal').addEventListener('click', async () => {
        say('');
        $('portal').disabled = true;
        const res = await api('POST', '/me/billing-portal', { flow: 'overview' });
        $('portal').disabled = false;
        if (res.status === 422) {
          say('No billing account yet: the billing portal opens after your first paid purchase.');
          return;
        }
        if (!res.ok || !/^https?:\\/\\//.test(res.data.url)) {
          say(res.message);
          return;
        }
        location.assign(res.data.url);
      });
      (async () => {
        const res = await api('GET', '/me');
        $('loading').hidden = true;
        if (res.status === 401) {
          $('signed-out').hidden = false;
          return;
        }
        if (!res.ok) {
          say(res.message);
          return;
        }
        $('who').textContent = 'Signed in as ' + res.data.email + '.';
        $('signed-in').hidden = false;
      })();`,
    )}`;
  return builtInPage(c, 200, 'Billing', body, { nonce });
}
