import type { AppDeps } from '../app.ts';
import { isUniqueViolation } from '../http/errors.ts';
import { first, sql } from '../platform/db.ts';

/**
 * The buyer of an anonymous checkout gets a real marketplace account: the one with the email they typed on
 * Stripe's page when it exists, else a new one made as Better Auth's sign-up makes one (so it is a user like any
 * other: credential account, `user_signup` interaction). Its password is random and never shown; the buyer
 * chooses one through the password-reset mail sent right away (through the mail outbox), which doubles as the
 * "welcome, set your password" mail. Safe under concurrency: the success page and the webhook may both get here
 * for the same buyer; the email is unique, so the loser of a race finds the winner's account.
 */
export interface Buyer {
  userId: string;
  email: string;
  /** The account was created for this purchase (now or by an earlier call for the same checkout). */
  created: boolean;
}

export async function findOrCreateBuyer(
  deps: AppDeps,
  input: { email: string; name?: string | undefined; stripeCustomerId: string },
): Promise<Buyer> {
  const email = input.email.trim().toLowerCase();
  let createdNow = false;
  let user = await findUserByEmail(deps, email);
  if (!user) {
    try {
      await createBuyerAccount(deps, email, input.name?.trim() || email.split('@')[0]!);
      createdNow = true;
    } catch (err) {
      // Someone else created it a moment ago (the concurrent webhook or success page): use theirs.
      if (!(await findUserByEmail(deps, email))) throw err;
    }
    user = await findUserByEmail(deps, email);
    if (!user) throw new Error('buyer account was not created');
  }

  // Link the Stripe customer to the account once; the first writer decides whether the account was made here.
  try {
    await first(
      deps.database.db,
      sql`insert into public.billing_customers (user_id, stripe_customer_id, account_created, created_at)
          values (${user.id}, ${input.stripeCustomerId}, ${createdNow}, ${deps.clock.now()})
          on conflict (user_id) do nothing`,
    );
  } catch (err) {
    // The customer is already linked to another user (the buyer's email changed hands): keep the first link.
    if (!isUniqueViolation(err)) throw err;
  }
  const link = await first<{ accountCreated: boolean }>(
    deps.database.db,
    sql`select account_created as "accountCreated" from public.billing_customers where user_id = ${user.id}`,
  );

  if (createdNow) {
    const origin = deps.config.frontendUrl ?? deps.config.publicBaseUrl;
    try {
      await deps.auth.api.requestPasswordReset({ body: { email, redirectTo: `${origin}/reset-password` } });
    } catch (err) {
      // The subscription must not be lost over a mail: the buyer can still use "forgot password" later.
      deps.logger.warn('could not send the set-password mail to a new buyer', { userId: user.id, err });
    }
  }
  return { userId: user.id, email: user.email, created: createdNow || (link?.accountCreated ?? false) };
}

async function findUserByEmail(deps: AppDeps, email: string) {
  return first<{ id: string; email: string }>(
    deps.database.db,
    sql`select id, email from "user" where lower(email) = ${email}`,
  );
}

/**
 * A user made the way sign-up makes one (the library's user and credential account, through its adapter so its
 * plugins' defaults apply, and our `user_signup` trigger), minus sign-up's verification mail and its answer for
 * an existing address: the set-password mail that follows goes to the same address and proves it when used.
 */
async function createBuyerAccount(deps: AppDeps, email: string, name: string): Promise<void> {
  const ctx = await deps.auth.$context;
  const hash = await ctx.password.hash(randomPassword());
  const user = await ctx.internalAdapter.createUser({ email, name, emailVerified: false }, { method: 'email-password' });
  await ctx.internalAdapter.linkAccount({ userId: user.id, providerId: 'credential', accountId: user.id, password: hash });
}

function randomPassword(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}
