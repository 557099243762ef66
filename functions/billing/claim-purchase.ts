import type { BillingDeps } from './billing-deps.ts';
import { ApiError, notFound } from '../http/errors.ts';
import { first, sql } from '../platform/db.ts';
import { createBuyerAccount, findUserByEmail, randomPassword } from './buyer-accounts.ts';
import { claimOfToken, hashToken, purchaseAbandoned } from './purchase-claims.ts';
import { readPurchaseToPlace, writeStripeRead } from './subscription-state.ts';
import { billingSubscription, findSubscriptionByStripeId } from './subscription-queries.ts';
import type { SubscriptionDto } from './subscriptions.ts';
import { invalidState } from './tiers.ts';

/**
 * POST /checkout/anonymous/claim { token }: the mailed claim link used. Holding the token shows the caller reads
 * the mail of the purchase's address, so, for the account that holds that address now (made here if none does):
 *   1. the claim is used up, the address marked verified and, if it was not verified, the account's password
 *      replaced, all its sessions and tokens ended and its consents to agents too (whoever set them never proved
 *      the address; the attacker of a pre-hijack loses the account here, and their agent no longer signs the owner
 *      in silently: public.mailbox_takes_account_back, as a password reset), and the Stripe customer linked: one
 *      SQL function, billing_claim_purchase;
 *   2. the subscription is written by the one writer as the webhook would (writeStripeRead), undoing at Stripe what
 *      the marketplace will not serve: a purchase of a banned account, a second paid subscription to an agent the
 *      account already pays for (refunded in full and canceled; the answer shows the subscription it keeps);
 *   3. the set-password step: a password-reset token of the library for that account, in the answer (it goes to
 *      whoever proved the mailbox, as a reset mail would) for POST /api/auth/reset-password.
 * Stripe is read first, so when it is unreachable the claim stays unused and the link can be followed again, and a
 * purchase Stripe no longer has is 422 INVALID_STATE `gone` with nothing used up.
 */
export interface ClaimedPurchase {
  subscription: SubscriptionDto;
  user: { id: string; email: string };
  /** For POST /api/auth/reset-password { token, newPassword }; valid as long as the library's reset tokens. */
  passwordResetToken: string;
}

export async function claimPurchase(deps: BillingDeps, token: string): Promise<ClaimedPurchase> {
  const claim = await claimOfToken(deps, token);
  if (!claim) throw notFound('Purchase claim');
  refuseUnusable(claim.claimedAt ? 'used' : claim.abandonedAt ? 'abandoned' : claim.expiresAt <= deps.clock.now() ? 'expired' : 'ok');

  const read = await readPurchaseToPlace(deps, claim.stripeSubscriptionId);
  let user = await findUserByEmail(deps, claim.email);
  if (!user) {
    // The account that held the address is gone: the purchase gets a new one, like any anonymous buyer's.
    await createBuyerAccount(deps, claim.email, undefined, claim.stripeCustomerId);
    user = await findUserByEmail(deps, claim.email);
    if (!user) throw new Error('claimant account was not created');
  }

  const ctx = await deps.auth.$context;
  const passwordHash = await ctx.password.hash(randomPassword());
  const result = await first<{ outcome: string }>(
    deps.database.db,
    sql`select outcome from public.billing_claim_purchase(${await hashToken(token)}, ${user.id}, ${passwordHash}, ${deps.clock.now()}::timestamptz)`,
  );
  const outcome = result?.outcome ?? 'unknown';
  if (outcome === 'unknown') throw notFound('Purchase claim');
  // Someone else used the link in between, or the address changed hands: nothing was written.
  if (outcome === 'no_account') throw invalidState('The account that holds this address changed; open the link again');
  // 'abandoned': the background work gave the purchase up since the check above (its undo is under way); the function
  // decided under the claim row's lock, so the purchase is refunded or claimed, never both.
  refuseUnusable(outcome === 'claimed' ? 'ok' : (outcome as 'used' | 'abandoned' | 'expired'));

  // The same write, with the same undos, as the webhook's, of a read made now the claim is used: an event about the
  // purchase that arrived after the first read found the claim pending and wrote nothing, so no newer read was kept
  // to refuse that first one, and a cancellation at Stripe in between was written back as active, for good (Stripe
  // sends nothing more about a canceled subscription; found by a review). Should Stripe fail now, the first read is
  // written and the next event about the purchase corrects it. Should Stripe fail during an undo, the claim is used
  // but the purchase is not lost: the next event about it, or the buyer's return to the success page, runs it again.
  const latest = await readPurchaseToPlace(deps, claim.stripeSubscriptionId).catch((err: unknown) => {
    if (err instanceof ApiError && err.code === 'INVALID_STATE') throw err;
    deps.logger.warn('claim: Stripe could not be read again; the first read is written', { stripeSubscriptionId: claim.stripeSubscriptionId, err });
    return read;
  });
  const written = await writeStripeRead(deps, latest, user.id);
  // No row of its own: a duplicate (undone) or a first payment pending beside a free subscription (deferred). The
  // account's subscription to the agent is what the answer shows.
  const subscription =
    (await findSubscriptionByStripeId(deps, claim.stripeSubscriptionId)) ??
    (written.subscriptionId ? (await billingSubscription(deps, written.subscriptionId))?.dto : undefined);
  if (!subscription) {
    // Stripe's price is no tier's (unknown_price): nothing could be written.
    throw new ApiError('INVALID_STATE', 'The purchase could not be added to this account; contact support', {
      reason: written.outcome,
    });
  }
  return { subscription, user: { id: user.id, email: user.email }, passwordResetToken: await passwordResetToken(deps, user.id) };
}

function refuseUnusable(state: 'ok' | 'used' | 'abandoned' | 'expired'): void {
  if (state === 'used') throw invalidState('This claim link was used already; sign in, or reset your password', { reason: 'used' });
  if (state === 'abandoned') throw purchaseAbandoned();
  if (state === 'expired') {
    throw invalidState('This claim link has expired; open the checkout success page again for a new one', { reason: 'expired' });
  }
}

/**
 * A reset-password token exactly as the library's POST /request-password-reset stores one (a verification value
 * `reset-password:<token>` naming the user, through its adapter), without the mail: the caller just proved the
 * mailbox. Its expiry is the library's, checked by the library against the real time.
 */
async function passwordResetToken(deps: BillingDeps, userId: string): Promise<string> {
  const ctx = await deps.auth.$context;
  const bytes = crypto.getRandomValues(new Uint8Array(18));
  const token = btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_');
  const seconds = ctx.options.emailAndPassword?.resetPasswordTokenExpiresIn ?? 3600;
  await ctx.internalAdapter.createVerificationValue({
    value: userId,
    identifier: `reset-password:${token}`,
    expiresAt: new Date(Date.now() + seconds * 1000),
  });
  return token;
}
