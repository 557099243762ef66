import { pagesOrigin, type Config } from '../platform/config.ts';
import { quotedText as quoted, type Mail } from '../platform/mailer.ts';
import { libraryBaseUrl } from './public-path.ts';

/**
 * The texts of the identity mails (verification, "someone signed up with your address", organization
 * invitation). Subjects are fixed: text a user chose (an organization's or a person's name) never goes into a
 * subject, where mail clients show it as if the marketplace said it; in a body it appears quoted, as what it is.
 */


/**
 * The verification link: the library's `GET /api/auth/verify-email?token=...`, which verifies and then redirects
 * to `callbackURL`. The library puts `/` there unless the client sent a callbackURL (checked against the trusted
 * origins on the way in and again on use); `/` becomes the sign-in page, which exists with and without a
 * FRONTEND_URL. A failed verification lands there too, with `error=INVALID_TOKEN` or `error=TOKEN_EXPIRED` added.
 */
export function verificationLink(config: Config, libraryUrl: string, token: string): string {
  let callback: string | null = null;
  try {
    callback = new URL(libraryUrl).searchParams.get('callbackURL');
  } catch {
    callback = null;
  }
  if (!callback || callback.startsWith('/')) callback = `${pagesOrigin(config)}/sign-in?verified=true`;
  const url = new URL(`${libraryBaseUrl(config)}/verify-email`);
  url.searchParams.set('token', token);
  url.searchParams.set('callbackURL', callback);
  return url.href;
}

/** The password-reset mail's subject (also the "choose your password" mail of a buyer's new account). */
export const PASSWORD_RESET_SUBJECT = 'Reset your Agent Marketplace password';

/**
 * The password-reset link: the library's `GET /api/auth/reset-password/<token>?callbackURL=...`, which sends the
 * browser to `callbackURL` with `?token=...` (or `?error=INVALID_TOKEN`). The caller's `redirectTo` becomes the
 * callbackURL (checked against the trusted origins by the library); a request without one would send the browser
 * to the library's error page, so the reset page is put there: the front end's, or the service's own.
 */
export function passwordResetLink(config: Config, libraryUrl: string): string {
  const url = new URL(libraryUrl);
  if (!url.searchParams.get('callbackURL')) url.searchParams.set('callbackURL', `${pagesOrigin(config)}/reset-password`);
  return url.href;
}

export function verificationMail(config: Config, email: string, link: string): Mail {
  return {
    to: email,
    subject: 'Confirm your Agent Marketplace email address',
    text:
      `Someone (hopefully you) created an Agent Marketplace account with ${email}.\n\n` +
      `Open this link within a day to confirm that this address is yours:\n${link}\n\n` +
      `If it wasn't you, ignore this mail: nothing is confirmed, and nothing bought with this address is given ` +
      `to that account.\n`,
  };
}

/** To the owner of an address someone tried to sign up with again (sign-up answers the same either way). */
export function existingAccountSignUpMail(config: Config, email: string): Mail {
  const origin = pagesOrigin(config);
  return {
    to: email,
    subject: 'Someone tried to create an Agent Marketplace account with your address',
    text:
      `Someone (perhaps you) tried to create a new Agent Marketplace account with ${email}, which already has ` +
      `an account. No new account was made.\n\n` +
      `If it was you, sign in instead: ${origin}/sign-in\n` +
      `Forgot your password? Ask for a reset link on the sign-in page.\n\n` +
      `If it wasn't you, you can ignore this mail: your account is unchanged.\n`,
  };
}

/** Organization invitation: fixed subject; the names people chose appear only in the body, in quotes. */
export function invitationMail(
  config: Config,
  invitation: { id: string; email: string; role: string; organizationName: string; inviterName: string; inviterEmail: string },
): Mail {
  const link = `${pagesOrigin(config)}/accept-invitation?id=${encodeURIComponent(invitation.id)}`;
  const inviter = invitation.inviterName
    ? `${quoted(invitation.inviterName)} (${invitation.inviterEmail})`
    : invitation.inviterEmail;
  return {
    to: invitation.email,
    subject: 'You have been invited to an organization on Agent Marketplace',
    text:
      `An Agent Marketplace user, ${inviter}, invited you to join the organization ` +
      `${quoted(invitation.organizationName)} as ${invitation.role}.\n` +
      `The names above were typed by that user; Agent Marketplace did not check them.\n\n` +
      `To accept, sign in with this address (${invitation.email}), confirm it if you have not yet, and open:\n${link}\n\n` +
      `If you don't know this person, ignore this mail.\n`,
  };
}
