import type { Context } from 'hono';
import type { AppEnv } from '../platform/app-types.ts';
import { builtInPage, requireBuiltInPages } from '../http/built-in-pages.ts';
import { randomNonce } from '../http/html.ts';

/**
 * GET /claim?token=...: where the claim mail points when there is no FRONTEND_URL (a front end serves its own
 * /claim and this page answers 404). It does what a front end would, with the public API only:
 *   1. on a click (never on load, so a mail scanner that opens links uses nothing up), it posts the token in the
 *      body to POST /checkout/anonymous/claim;
 *   2. then asks for the new password and posts it with the returned reset token to POST /api/auth/reset-password.
 * The token leaves the address bar as soon as the script runs (history.replaceState); the page sends no
 * referrer, and the request log keeps no query values.
 */
export function claimPage(c: Context<AppEnv>): Response {
  requireBuiltInPages(c);
  const nonce = randomNonce();
  const body = `
    <p id="intro">Confirm that this address is yours to add the purchase to your Agent Marketplace account.</p>
    <button type="button" id="claim">Add the purchase to my account</button>
    <form id="password" hidden>
      <p id="claimed"></p>
      <label for="new-password">New password</label>
      <input id="new-password" name="newPassword" type="password" minlength="8" maxlength="128" autocomplete="new-password" required>
      <button type="submit" id="save">Save password</button>
    </form>
    <p id="done" hidden>Your password is set. <a href="/sign-in">Sign in</a></p>
    <p id="status" role="status"></p>
    <script nonce="${nonce}">
      const token = new URLSearchParams(location.search).get('token') || '';
      history.replaceState(null, '', location.pathname);
      const status = document.getElementById('status');
      const claimButton = document.getElementById('claim');
      const form = document.getElementById('password');
      let resetToken = '';
      const post = (url, body) => fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        credentials: 'omit',
        body: JSON.stringify(body),
      });
      const problem = async (res) => {
        const body = await res.json().catch(() => ({}));
        return (body.error && body.error.message) || body.message || 'That did not work, try again.';
      };
      if (!token) {
        claimButton.disabled = true;
        status.textContent = 'This link has no claim token. Open the link from the mail again.';
      }
      claimButton.addEventListener('click', async () => {
        claimButton.disabled = true;
        status.textContent = '';
        const res = await post('/checkout/anonymous/claim', { token });
        if (!res.ok) {
          status.textContent = await problem(res);
          return;
        }
        const { data } = await res.json();
        resetToken = data.passwordResetToken;
        document.getElementById('intro').hidden = true;
        claimButton.hidden = true;
        document.getElementById('claimed').textContent =
          'The purchase is now part of the account ' + data.user.email + '. Choose its password:';
        form.hidden = false;
      });
      form.addEventListener('submit', async (event) => {
        event.preventDefault();
        status.textContent = '';
        const res = await post('/api/auth/reset-password', { token: resetToken, newPassword: document.getElementById('new-password').value });
        if (!res.ok) {
          status.textContent = await problem(res);
          return;
        }
        form.hidden = true;
        document.getElementById('done').hidden = false;
      });
    </script>`;
  return builtInPage(c, 200, 'Confirm your purchase', body, { nonce });
}
