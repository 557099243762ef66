import type { BillingDeps } from './billing-deps.ts';
import { first, sql } from '../platform/db.ts';
import { claimOfSubscription, ensureClaimMailed } from './purchase-claims.ts';
import { linkCustomer } from './customers.ts';
import { pagesOrigin } from '../platform/config.ts';
import { MAX_NAME_LENGTH, PASSWORD_RESET_SUBJECT } from '../auth/index.ts';
import { oneLine } from '../platform/text.ts';
import { DAY_MS } from '../platform/rate-limits.ts';

/**
 * Who gets an anonymous purchase (contract.md, "Anonymous purchases (revision 2)"). The buyer typed an email on
 * Stripe's page; an email nobody verified proves nothing, so the purchase attaches at once only to
 *   * a new account, made for it here (a user like any other: credential account, `user_signup` interaction),
 *     with a random password nobody sees; the buyer chooses one through the password-reset mail sent right away
 *     (through the mail outbox), which doubles as the "welcome, set your password" mail and goes to the same
 *     address, so using it proves the address;
 *   * an existing account whose email is verified;
 *   * the account made for this very purchase by an earlier call (the success page and the webhook both get
 *     here, in any order or at once).
 * When an unverified account holds the address, nothing attaches to it: the address gets a claim link instead
 * (purchase-claims.ts), and the purchase waits for it. A claim, once made, decides for every later call.
 */
export interface Buyer {
  userId: string;
  email: string;
  /** The account was created for this purchase (now or by an earlier call for the same checkout). */
  created: boolean;
}

/** `abandoned`: the claim was given up (unclaimed-purchases.ts); the purchase is, or is being, refunded. */
export type Placement = { kind: 'attached'; buyer: Buyer } | { kind: 'claim' } | { kind: 'abandoned' };

export interface AnonymousPurchase {
  email: string;
  name?: string | undefined;
  stripeCustomerId: string;
  stripeSubscriptionId: string;
  checkoutSessionId?: string | undefined;
  agentId?: string | undefined;
  tierId?: string | undefined;
}

export async function placeAnonymousPurchase(
  deps: BillingDeps,
  purchase: AnonymousPurchase,
  options: { renewExpiredClaim: boolean },
): Promise<Placement> {
  const email = purchase.email.trim().toLowerCase();
  const claim = await claimOfSubscription(deps, purchase.stripeSubscriptionId);
  if (claim?.claimedBy) {
    const owner = await findUserById(deps, claim.claimedBy);
    if (owner) return { kind: 'attached', buyer: { userId: owner.id, email: owner.email, created: false } };
  }
  if (claim && !claim.claimedAt) {
    if (claim.abandonedAt) return { kind: 'abandoned' };
    if (options.renewExpiredClaim) await ensureClaimMailed(deps, { ...purchase, email }, { renewExpired: true });
    return { kind: 'claim' };
  }

  let user = await findUserByEmail(deps, email);
  if (!user) {
    const created = await createBuyerAccount(deps, email, purchase.name, purchase.stripeCustomerId);
    // The loser of a race with the other writer finds the winner's account (made for this purchase too).
    user = await findUserByEmail(deps, email);
    if (!user) throw new Error('buyer account was not created');
    if (created) {
      await sendSetPasswordMail(deps, email, user.id);
      return { kind: 'attached', buyer: { userId: user.id, email: user.email, created: true } };
    }
  }

  // The account made for this very purchase (same Stripe customer) by the other writer: the buyer's.
  const madeForThis = await first<{ yes: boolean }>(
    deps.database.db,
    sql`select true as yes from public.billing_customers
         where user_id = ${user.id} and stripe_customer_id = ${purchase.stripeCustomerId} and account_created`,
  );
  if (madeForThis) {
    await mailSetPasswordIfLost(deps, user.id, email, purchase.stripeCustomerId);
    return { kind: 'attached', buyer: { userId: user.id, email: user.email, created: true } };
  }
  if (user.emailVerified) {
    await linkCustomer(deps, user.id, purchase.stripeCustomerId);
    return { kind: 'attached', buyer: { userId: user.id, email: user.email, created: false } };
  }

  // An unverified account holds the address: it gets nothing; the address gets the claim link.
  await ensureClaimMailed(deps, { ...purchase, email }, { renewExpired: options.renewExpiredClaim });
  return { kind: 'claim' };
}

/**
 * The user, its credential account (random password) and its Stripe customer link, in one statement: the link
 * commits with the user, so a concurrent writer that finds the user also finds that it was made for this
 * purchase. `on conflict (email) do nothing` makes the loser of a race wait for the winner, then step aside.
 * Made without the library's sign-up, which would mail a verification link too, and answer an existing address
 * with a made-up user; the role and ban fields are the admin plugin's defaults. Returns whether it was made now.
 * Its name is the one typed on Stripe's page held to a name's rule (auth/library-input.ts: one line, at most 200
 * characters; taken as typed, a right-to-left override or a C1 control reached the admin's user list and the session:
 * review 66), else the address's local part.
 */
export async function createBuyerAccount(
  deps: BillingDeps,
  email: string,
  typedName: string | undefined,
  stripeCustomerId: string,
): Promise<boolean> {
  const name = oneLine(typedName ?? '').slice(0, MAX_NAME_LENGTH).trim() || email.split('@')[0]!;
  const ctx = await deps.auth.$context;
  const hash = await ctx.password.hash(randomPassword());
  const now = deps.clock.now();
  const row = await first<{ id: string }>(
    deps.database.db,
    sql`with new_user as (
          insert into "user" (id, name, email, "emailVerified", role, banned, "createdAt", "updatedAt")
          values (${crypto.randomUUID()}, ${name}, ${email}, false, 'user', false, ${now}, ${now})
          on conflict (email) do nothing
          returning id
        ), credential as (
          insert into account (id, "accountId", "providerId", "userId", password, "createdAt", "updatedAt")
          select ${crypto.randomUUID()}, id, 'credential', id, ${hash}, ${now}, ${now} from new_user
        ), customer as (
          insert into public.billing_customers (user_id, stripe_customer_id, account_created, created_at)
          select id, ${stripeCustomerId}, true, ${now} from new_user
          on conflict do nothing
        )
        select id from new_user`,
  );
  return !!row;
}

/**
 * The set-password mail goes out after the account commits (the library's reset, its own transaction), and a lost
 * connection between the two left a paid buyer with an account, a page saying a link was mailed, and no mail, for
 * good: every later call for the purchase found the account made and mailed nothing (found by review 42). So a later
 * call (the success page again, Stripe's redelivery) mails it when no reset mail went to the address since the account
 * was made and its password was never set: once per purchase (claimed on its customer row, so calls at once send one),
 * from a minute after the account (the first call's mail is queued within that: the success page and the webhook
 * arriving together must not both mail, a second reset mail ends the first one's link) to 6 days after it (the outbox
 * keeps done mails 7 days; after that a delivered mail looked lost: review 43).
 */
async function mailSetPasswordIfLost(deps: BillingDeps, userId: string, email: string, stripeCustomerId: string): Promise<void> {
  const now = deps.clock.now();
  const lost = await first<{ yes: boolean }>(
    deps.database.db,
    sql`update public.billing_customers b set set_password_resent_at = ${now}
         where b.user_id = ${userId} and b.stripe_customer_id = ${stripeCustomerId} and b.account_created
           and b.set_password_resent_at is null
           and exists (
             select 1 from "user" u join account a on a."userId" = u.id and a."providerId" = 'credential'
              where u.id = b.user_id and a."updatedAt" = a."createdAt"
                and u."createdAt" < ${new Date(now.getTime() - 60_000)} and u."createdAt" > ${new Date(now.getTime() - 6 * DAY_MS)}
                and not exists (select 1 from mail_outbox m
                                 where m.to_address = u.email and m.subject = ${PASSWORD_RESET_SUBJECT} and m.created_at >= u."createdAt"))
        returning true as yes`,
  );
  if (lost) await sendSetPasswordMail(deps, email, userId);
}

/** The "welcome, choose your password" mail: the library's password reset, to the buyer's address. */
async function sendSetPasswordMail(deps: BillingDeps, email: string, userId: string): Promise<void> {
  const origin = pagesOrigin(deps.config);
  try {
    await deps.auth.api.requestPasswordReset({ body: { email, redirectTo: `${origin}/reset-password` } });
  } catch (err) {
    // The subscription must not be lost over a mail: the buyer can still use "forgot password" later.
    deps.logger.warn('could not send the set-password mail to a new buyer', { userId, err });
  }
}

export async function findUserByEmail(deps: BillingDeps, email: string) {
  return first<{ id: string; email: string; emailVerified: boolean }>(
    deps.database.db,
    sql`select id, email, "emailVerified" from "user" where lower(email) = ${email.trim().toLowerCase()}`,
  );
}

async function findUserById(deps: BillingDeps, userId: string) {
  return first<{ id: string; email: string }>(deps.database.db, sql`select id, email from "user" where id = ${userId}`);
}

export function randomPassword(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}
