import type { Context } from 'hono';
import { builtInPage, pageScript, requireBuiltInPages, signInComingBackTo } from '../http/built-in-pages.ts';
import { escapeHtml, randomNonce } from '../http/html.ts';
import type { AppEnv } from '../platform/app-types.ts';
import { APOSTROPHE_RUNS, DOUBLE_QUOTE_MARKS } from '../platform/text.ts';
import { newRouter } from '../http/router.ts';

/**
 * The account pages the identity mails link to when there is no FRONTEND_URL (http/built-in-pages.ts): where a
 * password is reset, and where an organization invitation is accepted. Outside the OpenAPI document, like /sign-in.
 */
export function accountPages() {
  const router = newRouter();
  router.get('/reset-password', (c) => resetPasswordPage(c));
  router.get('/accept-invitation', (c) => acceptInvitationPage(c));
  return router;
}

/**
 * GET /reset-password: the reset mail's link goes through the library's `GET /api/auth/reset-password/<token>`,
 * which sends the browser here with `?token=...` (or `?error=INVALID_TOKEN` for a used, expired or unknown one).
 * With a token: a new-password field posting `{ token, newPassword }` to `POST /api/auth/reset-password`. Without
 * one (or after a refusal): the address field that asks `POST /api/auth/request-password-reset` for a new link,
 * which comes back here (the sign-in page's "Forgot your password?").
 */
function resetPasswordPage(c: Context<AppEnv>): Response {
  requireBuiltInPages(c);
  const token = c.req.query('token') ?? '';
  const linkRefused = c.req.query('error') !== undefined;
  const nonce = randomNonce();
  const body = `
    <div id="page" data-token="${escapeHtml(token)}" data-link-refused="${linkRefused}"
         data-redirect-to="${escapeHtml(`${c.var.deps.config.publicBaseUrl}/reset-password`)}"></div>
    <form id="new-password-form" hidden>
      <label for="new-password">New password</label>
      <input id="new-password" name="newPassword" type="password" autocomplete="new-password" required>
      <button type="submit" id="save">Save the new password</button>
    </form>
    <p id="done" hidden>Your new password is set, and every session of the account has ended. <a id="sign-in" href="/sign-in">Sign in</a></p>
    <form id="request-form" hidden>
      <p id="request-intro">Type the address of your account: we mail it a link to choose a new password.</p>
      <label for="email">Email</label>
      <input id="email" name="email" type="email" autocomplete="email" required>
      <button type="submit" id="request">Mail me a link</button>
    </form>
    <p id="requested" hidden>If an account has this address, a link is on its way to it. It works for an hour, once.</p>
    <p id="status" role="status"></p>
    ${pageScript(
      nonce,
      `
      const page = $('page').dataset;
      // The token leaves the address bar (and the history) at once; the page sends no referrer either.
      history.replaceState(null, '', location.pathname);
      const refusedLink = 'This link no longer works: it was used already, it expired (a link works for an hour), or a newer one replaced it. Ask for a new one:';
      const askForLink = (why) => {
        $('new-password-form').hidden = true;
        if (why) $('request-intro').textContent = why;
        $('request-form').hidden = false;
      };
      if (page.token) $('new-password-form').hidden = false;
      else askForLink(page.linkRefused === 'true' ? refusedLink : '');
      $('new-password-form').addEventListener('submit', async (event) => {
        event.preventDefault();
        say('');
        $('save').disabled = true;
        const res = await api('POST', '/api/auth/reset-password', { token: page.token, newPassword: $('new-password').value }, 'omit');
        $('save').disabled = false;
        if (res.ok) {
          $('new-password-form').hidden = true;
          $('done').hidden = false;
        } else if (res.code === 'INVALID_TOKEN') {
          askForLink(refusedLink);
        } else {
          // A refused password (too short, too long: the library's rule, not repeated in the field) or a limit, in
          // the library's own words.
          say(res.message);
        }
      });
      $('request-form').addEventListener('submit', async (event) => {
        event.preventDefault();
        say('');
        const res = await api('POST', '/api/auth/request-password-reset', { email: $('email').value, redirectTo: page.redirectTo }, 'omit');
        if (!res.ok) {
          say(res.message);
          return;
        }
        $('request-form').hidden = true;
        $('requested').hidden = false;
      });`,
    )}`;
  return builtInPage(c, 200, 'Choose a new password', body, { nonce });
}

/**
 * GET /accept-invitation?id=...: the invitation mail's link. Signed out, it offers the sign-in page, which comes
 * back here. Signed in, it shows the invitation (the library's get-invitation) with Accept and Reject, which post
 * to the library's accept-invitation / reject-invitation on a click. The library answers only the invited address,
 * once it is verified; whatever it refuses, the page shows its message.
 */
function acceptInvitationPage(c: Context<AppEnv>): Response {
  requireBuiltInPages(c);
  const id = c.req.query('id') ?? '';
  if (!id) {
    return builtInPage(c, 400, 'Invitation link not valid', '<p>This invitation link has no invitation id. Open the link from the mail again.</p>');
  }
  const signIn = signInComingBackTo(`/accept-invitation?id=${encodeURIComponent(id)}`);
  const nonce = randomNonce();
  const body = `
    <div id="page" data-invitation-id="${escapeHtml(id)}"></div>
    <p id="loading">Looking up the invitation…</p>
    <p id="signed-out" hidden>Sign in with the address the invitation was sent to, and you come back here.
      <a id="sign-in" href="${escapeHtml(signIn)}">Sign in</a></p>
    <div id="invitation" hidden>
      <p id="summary"></p>
      <button type="button" id="accept">Accept</button>
      <button type="button" id="reject" class="secondary">Reject</button>
    </div>
    <p id="outcome" hidden></p>
    <p id="status" role="status"></p>
    <p id="verify-first" hidden>Confirm your address first, with the link mailed to it when the account was made, then
      open this page again.</p>
    <p id="other-account" hidden><a href="${escapeHtml(signIn)}">Sign in with another account</a></p>
    ${pageScript(
      nonce,
      `
      const invitationId = $('page').dataset.invitationId;
      const refused = (res) => {
        say(res.message);
        // Not verified yet, or signed in as someone else: the way on is the verification link, or the invited address.
        $('verify-first').hidden = !/EMAIL_VERIFICATION/.test(res.code || '');
        $('other-account').hidden = res.status !== 403;
      };
      const answer = async (action, done) => {
        say('');
        $('accept').disabled = $('reject').disabled = true;
        const res = await api('POST', '/api/auth/organization/' + action, { invitationId });
        if (!res.ok) {
          $('accept').disabled = $('reject').disabled = false;
          refused(res);
          return;
        }
        $('invitation').hidden = true;
        $('outcome').textContent = done;
        $('outcome').hidden = false;
      };
      (async () => {
        const res = await api('GET', '/api/auth/organization/get-invitation?id=' + encodeURIComponent(invitationId));
        $('loading').hidden = true;
        if (res.status === 401) {
          $('signed-out').hidden = false;
          return;
        }
        if (!res.ok) {
          refused(res);
          return;
        }
        const invitation = res.data;
        // The organization's name in quotes it cannot close (platform/text.ts withoutDoubleQuotes, reviews 120 and 121).
        const organization = String(invitation.organizationName)
          .replace(new RegExp(${JSON.stringify(DOUBLE_QUOTE_MARKS.source)}, 'g'), "'")
          .replace(new RegExp(${JSON.stringify(APOSTROPHE_RUNS.source)}, 'g'), "'");
        $('summary').textContent = invitation.inviterEmail + ' invited you (' + invitation.email + ') to join the organization "' +
          organization + '" as ' + invitation.role + '.';
        $('invitation').hidden = false;
        $('accept').addEventListener('click', () => answer('accept-invitation', 'You are now a member of "' + organization + '".'));
        $('reject').addEventListener('click', () => answer('reject-invitation', 'You declined the invitation. Nothing changed on your account.'));
      })();`,
    )}`;
  return builtInPage(c, 200, 'Organization invitation', body, { nonce });
}
