import type { BillingDeps } from './billing-deps.ts';
import { ApiError } from '../http/errors.ts';
import { first, sql } from '../platform/db.ts';
import { pagesOrigin } from '../platform/config.ts';

/**
 * Claims of anonymous purchases (contract.md, "Anonymous purchases (revision 2)"). When the buyer's email belongs
 * to an account whose address was never verified, whoever made that account may not own the address (account
 * pre-hijacking: sign up with a victim's address, wait for the victim to buy). So the purchase attaches to no
 * one; the address gets a single-use link instead, and whoever follows it has shown they read that mailbox
 * (claim-purchase.ts). Storage: public.purchase_claims, one row per Stripe subscription, holding only the
 * SHA-256 of the token; the token itself exists only in the mail. A claim nobody uses is given up a week after its
 * latest link expired: the purchase is refunded and canceled, the link refused (unclaimed-purchases.ts).
 */

/** How long a claim link works. Completing the checkout again after that mails a new one. */
export const CLAIM_TTL_MS = 7 * 24 * 60 * 60 * 1000;

/**
 * How long after its latest link expired a purchase nobody claimed is given up: canceled at Stripe and refunded in
 * full (unclaimed-purchases.ts), since Stripe charges the buyer every period for a subscription no account holds
 * and the buyer has no portal to stop it. The week leaves a buyer who missed the mail time to come back to the
 * success page for a new link (so a purchase is given up at least 14 days after the last link was mailed), and is
 * shorter than a monthly period, so a second charge before the undo is rare.
 */
export const ABANDONED_AFTER_EXPIRY_MS = 7 * 24 * 60 * 60 * 1000;

export interface PurchaseClaim {
  id: string;
  email: string;
  stripeSubscriptionId: string;
  stripeCustomerId: string;
  expiresAt: Date;
  claimedAt: Date | null;
  claimedBy: string | null;
  /** Given up (unclaimed-purchases.ts): the link is refused and the purchase is, or is being, refunded. */
  abandonedAt: Date | null;
}

const claimColumns = sql`id, email, stripe_subscription_id as "stripeSubscriptionId", stripe_customer_id as "stripeCustomerId",
  expires_at as "expiresAt", claimed_at as "claimedAt", claimed_by as "claimedBy", abandoned_at as "abandonedAt"`;

/** The answer to a link (or a return to the success page) of a purchase given up: nothing is left to claim. */
export function purchaseAbandoned(): ApiError {
  return new ApiError(
    'INVALID_STATE',
    'This purchase was canceled and refunded because its address was not confirmed in time; sign in (or reset your password) and buy again',
    { reason: 'abandoned' },
  );
}

/** An anonymous purchase that ended before anyone held it, or whose buyer's account was removed: nothing to place. */
export function purchaseEnded(): ApiError {
  return new ApiError('INVALID_STATE', 'This purchase has ended, so there is nothing to add to an account; buy again to use the agent', {
    reason: 'ended',
  });
}

/**
 * The answer to a claim link, or a return to the success page, of a purchase Stripe no longer has (deleted at
 * Stripe, or of another account or mode): nothing can be added to an account, and nothing is used up or made.
 */
export function purchaseGone(): ApiError {
  return new ApiError('INVALID_STATE', 'Stripe no longer has this purchase, so there is nothing to add to an account; contact support', {
    reason: 'gone',
  });
}

export async function claimOfSubscription(deps: BillingDeps, stripeSubscriptionId: string): Promise<PurchaseClaim | undefined> {
  return first<PurchaseClaim>(
    deps.database.db,
    sql`select ${claimColumns} from public.purchase_claims where stripe_subscription_id = ${stripeSubscriptionId}`,
  );
}

export async function claimOfToken(deps: BillingDeps, token: string): Promise<PurchaseClaim | undefined> {
  return first<PurchaseClaim>(
    deps.database.db,
    sql`select ${claimColumns} from public.purchase_claims where token_hash = ${await hashToken(token)}`,
  );
}

export interface ClaimRequest {
  email: string;
  stripeSubscriptionId: string;
  stripeCustomerId: string;
  checkoutSessionId?: string | undefined;
  agentId?: string | undefined;
  tierId?: string | undefined;
}

/**
 * Makes sure the purchase has a claim and that its address was mailed the link: once per subscription (the
 * success page and the webhook may both get here, in any order or at once), plus, when `renewExpired`, a new
 * link (new token, new expiry) if the pending one has expired, unless the purchase was given up meanwhile (its
 * refund is under way or done: a new link would promise what is gone). The claim and its mail are written in one
 * transaction, so a link is never stored without its mail or mailed without being stored.
 */
export async function ensureClaimMailed(deps: BillingDeps, request: ClaimRequest, options: { renewExpired: boolean }): Promise<void> {
  const now = deps.clock.now();
  const expiresAt = new Date(now.getTime() + CLAIM_TTL_MS);
  const token = newClaimToken();
  const tokenHash = await hashToken(token);
  const email = request.email.trim().toLowerCase();
  const purchase = await purchaseName(deps, request);
  await deps.database.db.transaction().execute(async (trx) => {
    const row = await first<{ id: string }>(
      trx,
      options.renewExpired
        ? sql`insert into public.purchase_claims
                (token_hash, email, stripe_subscription_id, stripe_customer_id, stripe_checkout_session_id, expires_at, created_at)
              values (${tokenHash}, ${email}, ${request.stripeSubscriptionId}, ${request.stripeCustomerId},
                      ${request.checkoutSessionId ?? null}, ${expiresAt}, ${now})
              on conflict (stripe_subscription_id) do update
                set token_hash = excluded.token_hash, expires_at = excluded.expires_at
                where public.purchase_claims.claimed_at is null and public.purchase_claims.abandoned_at is null
                  and public.purchase_claims.expires_at <= ${now}
              returning id`
        : sql`insert into public.purchase_claims
                (token_hash, email, stripe_subscription_id, stripe_customer_id, stripe_checkout_session_id, expires_at, created_at)
              values (${tokenHash}, ${email}, ${request.stripeSubscriptionId}, ${request.stripeCustomerId},
                      ${request.checkoutSessionId ?? null}, ${expiresAt}, ${now})
              on conflict (stripe_subscription_id) do nothing
              returning id`,
    );
    if (!row) return; // claimed, given up, or mailed already and still valid
    await deps.mailer.enqueue(trx, claimMail(deps, email, purchase, token));
  });
}

/** The link goes to the page that posts the token (the front end's `/claim`, or the service's own). */
function claimMail(deps: BillingDeps, email: string, purchase: string, token: string) {
  const origin = pagesOrigin(deps.config);
  const link = `${origin}/claim?token=${encodeURIComponent(token)}`;
  return {
    to: email,
    subject: 'Confirm your Agent Marketplace purchase',
    text:
      `Someone bought ${purchase} on Agent Marketplace and gave ${email} as their address.\n\n` +
      `An Agent Marketplace account with this address exists, but the address was never confirmed, so the purchase ` +
      `has not been added to it yet.\n\n` +
      `If you made this purchase, open this link within 7 days to confirm the address, add the purchase to the ` +
      `account and choose a new password for it:\n${link}\n\n` +
      `The link works once. If it is not used, the purchase is canceled and refunded in full a week after the link ` +
      `expires. If you did not buy anything, ignore this mail.\n`,
  };
}

/** What the buyer bought, for a mail: the plan and agent a checkout's metadata names. */
export async function purchaseName(deps: Pick<BillingDeps, 'database'>, request: Pick<ClaimRequest, 'agentId' | 'tierId'>): Promise<string> {
  if (!request.agentId) return 'a subscription';
  const row = await first<{ agent: string; tier: string | null }>(
    deps.database.db,
    sql`select a.name as agent, (select t.name from public.tiers t where t.id = ${request.tierId ?? null}::uuid and t.agent_id = a.id) as tier
          from public.agents a where a.id = ${request.agentId}::uuid`,
  ).catch(() => undefined);
  if (!row) return 'a subscription';
  // names are one line: the database holds them to it (20261127005900)
  const { agent, tier } = row;
  return tier ? `the "${tier}" plan of "${agent}"` : `a subscription to "${agent}"`;
}

/** 32 random bytes, base64url: what the mail carries. */
function newClaimToken(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** What the table stores instead of the token: its SHA-256, hex. */
export async function hashToken(token: string): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(token));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
}
