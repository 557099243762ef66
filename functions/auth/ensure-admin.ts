import type { AppDeps } from '../platform/app-types.ts';
import { first, inTurn, sql, type Db } from '../platform/db.ts';

/**
 * Makes sure an account with this email exists, can sign in with this password, and has the platform_admin
 * role (ADMIN_EMAIL / ADMIN_PASSWORD at start). Idempotent: on later starts it only repairs what differs,
 * so changing ADMIN_PASSWORD and restarting changes the password. The password is set once per ADMIN_PASSWORD value
 * and account (public.admin_password_applied, migration 20261127006400): a password the admin changed since is kept,
 * and they stay signed in, across restarts and the edge's cold isolates, which set it back and signed them out.
 *
 * Instances that start together on one database take turns (inTurn): the first creates the account, the others
 * find it. Without it, both created it, the unique email refused one, and that instance crashed at start.
 */
export async function ensureAdmin(
  deps: Pick<AppDeps, 'auth' | 'database' | 'logger' | 'clock' | 'config'>,
  admin: { email: string; password: string; name?: string },
): Promise<{ userId: string; created: boolean }> {
  return inTurn(deps.database, 'ensure_admin', () => ensure(deps, admin));
}

async function ensure(
  deps: Pick<AppDeps, 'auth' | 'database' | 'logger' | 'clock' | 'config'>,
  admin: { email: string; password: string; name?: string },
): Promise<{ userId: string; created: boolean }> {
  const db = deps.database.db;
  const email = admin.email.toLowerCase();
  const ctx = await deps.auth.$context;
  let user = await first<{ id: string; role: string | null; banned: boolean | null; verified?: boolean }>(
    db,
    sql`select id, role, banned, "emailVerified" as verified from "user" where email = ${email}`,
  );
  let created = false;
  if (!user) {
    const result = await deps.auth.api.signUpEmail({ body: { email, password: admin.password, name: admin.name ?? 'Platform admin' } });
    user = { id: result.user.id, role: null, banned: false };
    created = true;
    await markApplied(db, user.id, await fingerprint(deps.config.authSecret, user.id, admin.password), deps.clock.now());
  } else {
    // The ADMIN_PASSWORD value already applied to this very account: whatever the admin did with their password since
    // stands (nothing to repair, nobody signed out).
    const value = await fingerprint(deps.config.authSecret, user.id, admin.password);
    if (!(user.verified && (await appliedBefore(db, user.id, value)))) {
      const account = await first<{ id: string; password: string | null }>(
        db,
        sql`select id, password from account where "userId" = ${user.id} and "providerId" = 'credential'`,
      );
      const matches = account?.password ? await ctx.password.verify({ hash: account.password, password: admin.password }) : false;
      const hash = matches ? undefined : await ctx.password.hash(admin.password);
      const userId = user.id;
      await db.transaction().execute(async (trx) => {
        if (hash && account) {
          await sql`update account set password = ${hash}, "updatedAt" = ${deps.clock.now()} where id = ${account.id}`.execute(trx);
        } else if (hash) {
          await sql`insert into account (id, "accountId", "providerId", "userId", password, "createdAt", "updatedAt")
                    values (${crypto.randomUUID()}, ${userId}, 'credential', ${userId}, ${hash}, ${deps.clock.now()}, ${deps.clock.now()})`.execute(trx);
        }
        // Named by the operator, the address's account is taken back as a password reset takes it back (its password
        // write has ended every session and token): whoever held it, e.g. someone who signed up with the address before
        // the operator named it, keeps no consent to an agent (theirs would sign the admin in silently with prompt=none)
        // and no pending invitation (found by review 48). Not when the account is already the operator's (the password
        // matches and the address was verified, as the first start marks it).
        if (hash || !user!.verified) await sql`select public.mailbox_takes_account_back(${userId})`.execute(trx);
        await markApplied(trx, userId, value, deps.clock.now());
      });
    }
  }
  // A usable admin: the role, and no ban. The ban was lifted only with a missing role, so an ADMIN_EMAIL admin that
  // another admin banned (role kept) stayed banned on every restart: the way back closed when it was needed.
  if (user.role !== 'platform_admin' || user.banned) {
    await sql`update "user" set role = 'platform_admin', banned = false, "banReason" = null, "banExpires" = null,
                     "emailVerified" = true, "updatedAt" = ${deps.clock.now()}
               where id = ${user.id}`.execute(db);
    if (user.banned) deps.logger.warn('ADMIN_EMAIL account was banned: ban lifted at start-up', { userId: user.id });
  }
  deps.logger.info('admin account ensured', { userId: user.id, email, created });
  return { userId: user.id, created };
}

/** Which ADMIN_PASSWORD value was applied to which account, without keeping the value: an HMAC under AUTH_SECRET. */
async function fingerprint(secret: string, userId: string, password: string): Promise<string> {
  const encoder = new TextEncoder();
  const key = await crypto.subtle.importKey('raw', encoder.encode(`admin-password:${secret}`), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  const mac = new Uint8Array(await crypto.subtle.sign('HMAC', key, encoder.encode(`${userId}\n${password}`)));
  return Array.from(mac, (b) => b.toString(16).padStart(2, '0')).join('');
}

async function appliedBefore(db: Db, userId: string, value: string): Promise<boolean> {
  const row = await first<{ fingerprint: string }>(db, sql`select fingerprint from public.admin_password_applied where user_id = ${userId}`);
  return row?.fingerprint === value;
}

async function markApplied(db: Db, userId: string, value: string, now: Date): Promise<void> {
  await sql`insert into public.admin_password_applied (user_id, fingerprint, applied_at) values (${userId}, ${value}, ${now})
            on conflict (user_id) do update set fingerprint = excluded.fingerprint, applied_at = excluded.applied_at`.execute(db);
}
