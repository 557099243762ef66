import { betterAuth, type BetterAuthOptions } from 'better-auth';
import { createAuthMiddleware, getSessionFromCtx, isAPIError } from 'better-auth/api';
import { admin, jwt, openAPI, organization } from 'better-auth/plugins';
import { adminAc, defaultStatements, userAc } from 'better-auth/plugins/admin/access';
import { createAccessControl } from 'better-auth/plugins/access';
import { queueAfterTransactionHook } from '@better-auth/core/context';
import { oauthProvider } from '@better-auth/oauth-provider';
import type { Clock } from '../platform/clock.ts';
import type { Config } from '../platform/config.ts';
import { isConnectionLost, isTransientConflict, sql, type Database } from '../platform/db.ts';
import { isUniqueViolation } from '../http/errors.ts';
import { APIError } from '@better-auth/core/error';
import type { Logger } from '../platform/logger.ts';
import type { Mailer } from '../platform/mailer.ts';
import {
  existingAccountSignUpMail,
  invitationMail,
  PASSWORD_RESET_SUBJECT,
  passwordResetLink,
  verificationLink,
  verificationMail,
} from './account-mails.ts';
import {
  assertInviterStands,
  assertWellFormedRole,
  giveBackRefusedInvitation,
  invitationRefusedAtInsert,
  takeInvitation,
  takeInvitationBeforeTheRoute,
} from './invitation-rules.ts';
import { ownsMostOrganizations, takeOrganizationCreation } from './organization-limits.ts';
import { refuseBadLibraryInput } from './library-input.ts';
import { EmptyListsPlugin } from './empty-lists.ts';
import { libraryDb } from './library-database.ts';
import { PendingInvitationsFirstPlugin } from './invitation-order.ts';
import { mayMailRecipient } from './recipient-allowance.ts';
import { oauthProviderOptions } from './oauth/provider-options.ts';
import { isLastAdminRefusal, lastAdminRefused } from './last-admin.ts';
import { isOrganizationOwnerRefusal, organizationOwnerRefused } from './organization-owners.ts';
import {
  invitationLimitRefused,
  isInvitationLimitRefusal,
  isMembershipLimitRefusal,
  isOrganizationGone,
  isSecondMembership,
  membershipLimitRefused,
  organizationGoneRefused,
  secondMembershipRefused,
} from './organization-memberships.ts';
import { CLOSED_ENDPOINTS } from './oauth/closed-endpoints.ts';
import { libraryBaseUrl } from './public-path.ts';


/**
 * Better Auth: email/password sessions, the admin and organization plugins, the jwt plugin (our signing keys,
 * published at /api/auth/jwks) and the OAuth 2.1 / OIDC provider. It shares the application's Kysely handle,
 * so auth and app use the same connections; its tables come from our SQL migration (20261122000200_auth.sql),
 * never from the library's migrator.
 */

export const ROLES = ['user', 'platform_admin'] as const;
export type Role = (typeof ROLES)[number];

/**
 * Access control of the admin plugin: `platform_admin` may use every admin endpoint but impersonation and setting a
 * user's password, `user` none. Neither is the marketplace's (contract.md has no such operation), and both let an
 * admin act as the user: impersonation made a session OF the user, hidden from their session list, that outlived the
 * admin's demotion or ban and could consent to agents in the user's name (found by a review); a password the admin
 * chose signed the admin in as the user, a session of the user's own (review 22). A user who lost their password
 * asks for a reset link, mailed to their address. (An admin's change of a user's address is refused for the same
 * reason: `refuseBadUserData` in library-input.ts.)
 */
const accessControl = createAccessControl(defaultStatements);
const roles = {
  user: accessControl.newRole(userAc.statements),
  platform_admin: accessControl.newRole({
    ...adminAc.statements,
    user: adminAc.statements.user.filter((action) => action !== 'impersonate' && action !== 'set-password'),
  }),
};

export interface AuthDeps {
  config: Config;
  database: Database;
  logger: Logger;
  clock: Clock;
  mailer: Mailer;
  /** Replaces the library's password hashing (deps.ts `BuildOptions.passwordHashing`: tests only). */
  passwordHashing?: PasswordHashing | undefined;
}

/** How passwords are hashed and checked: the library's scrypt (N=16384, r=16) unless a test build passes its own. */
export interface PasswordHashing {
  hash: (password: string) => Promise<string>;
  verify: (input: { hash: string; password: string }) => Promise<boolean>;
}

/**
 * Work of the library's mail hooks, run once the library's transaction (sign-up runs whole in one) has committed,
 * and at once outside one. The hooks query the pool: inside the transaction each sign-up held one connection and
 * waited for a second, so as many sign-ups at once as the pool has connections (10, within one address's sign-up
 * limit) held them all, and no request touching the database was answered until PostgreSQL's idle-in-transaction
 * timeout ended them a minute later (found by a review). A mail for a sign-up that rolls back is not queued either.
 */
const afterLibraryCommit = (work: () => Promise<void>): Promise<void> => queueAfterTransactionHook(work);

/** A line of the library's log, cut to 1,000 characters. */
const clip = (text: string): string => (text.length > 1000 ? `${text.slice(0, 1000)}... (${text.length} characters)` : text);

/** Origins whose browsers may use the session cookie on state-changing requests. */
export function trustedOrigins(config: Config): string[] {
  const origins = [new URL(config.publicBaseUrl).origin];
  if (config.frontendUrl) origins.push(new URL(config.frontendUrl).origin);
  return origins;
}

export function authOptions(deps: AuthDeps) {
  const { config, database, mailer, logger } = deps;
  const https = config.publicBaseUrl.startsWith('https://');
  return {
    appName: 'Agent Marketplace',
    // The whole public URL of its routes: with a path in PUBLIC_BASE_URL (the edge) the library ignores `basePath`
    // and took that path for its own (public-path.ts).
    baseURL: libraryBaseUrl(config),
    basePath: '/api/auth',
    secret: config.authSecret,
    database: {
      // (with `in ()` made a constant: the organization plugin sends it for an empty page, empty-lists.ts; pending
      // invitations read first, invitation-order.ts; and joining the transaction of a request run in one,
      // library-database.ts)
      db: libraryDb(database.db, (handle) => handle.withPlugin(new EmptyListsPlugin()).withPlugin(new PendingInvitationsFirstPlugin())),
      type: 'postgres',
      // The embedded database has one connection: a library transaction there would hold it while a hook
      // (or a concurrent request) waits for it. On a real server, sign-up's user+account writes are atomic.
      transaction: database.kind === 'postgres',
    },
    telemetry: { enabled: false },
    // Also refused by the library itself (404), should a request ever reach it past closed-endpoints.ts: the
    // client-management and session-JWT endpoints nobody may call (the parameterised ones have no exact path).
    // The openAPI plugin's two endpoints are off too (404): the document is /openapi.json, the reference /docs.
    // verify-password answers whether a password is right and nothing else: an oracle for whoever holds a session
    // (the library marks it server-only, which only hides it from its docs; found by a review).
    disabledPaths: [
      ...CLOSED_ENDPOINTS.filter((e) => !e.path.includes(':')).map((e) => e.path),
      '/open-api/generate-schema',
      '/reference',
      '/verify-password',
    ],
    trustedOrigins: trustedOrigins(config),
    // Our own limiter (functions/http/rate-limit.ts) answers 429 in the API envelope with Retry-After.
    rateLimit: { enabled: false },
    // The library logs refused client input at `error`, with the caller's whole value in the message (a refused
    // callbackURL of 900 KB made one error line of 900 KB; found by a review): its lines are at most `warn` here, cut
    // to 1,000 characters each. A failure on our side reaches onAPIError below, logged at `error` there.
    logger: {
      level: 'warn',
      log: (level, message, ...args) =>
        logger.log(level === 'error' ? 'warn' : level, `better-auth: ${clip(String(message))}`, args.length ? { args: args.map((a) => clip(String(a))) } : {}),
    },
    // A lost database connection inside the library, or a transaction PostgreSQL ended in a deadlock or a
    // serialization conflict, goes on to the app's error handler, which answers 503 UNAVAILABLE with Retry-After
    // as on every other route (the library itself would answer a bare 500). Other
    // failures are logged as the library logs them; its own 4xx answers are unchanged.
    onAPIError: {
      onError: (err) => {
        if (isConnectionLost(err) || isTransientConflict(err)) throw err;
        // An account accepting an invitation to an organization it is already a member of: the database refuses the
        // second membership (review 24), answered as the plugin answers inviting a member (organization-memberships.ts).
        if (isSecondMembership(err)) throw secondMembershipRefused();
        if (isOrganizationGone(err)) throw organizationGoneRefused();
        // Invitees accepting at once into a nearly full organization: the database refuses the 101st member (review 92).
        if (isMembershipLimitRefusal(err)) throw membershipLimitRefused();
        // Invitations sent at once into an organization nearly full of pending ones: the database refuses the 101st.
        // (The library's hooks.after never sees this failure: what the call took is given back around it, mount.ts.)
        if (isInvitationLimitRefusal(err)) {
          invitationRefusedAtInsert();
          throw invitationLimitRefused();
        }
        // The library checks a unique value (an organization's slug) and then inserts it: two requests at once both
        // pass the check, and the second insert fails. That is the contract's 409 CONFLICT, not a 500 (found by a review),
        // in the library's `{ code, message }` as its other answers under /api/auth (review 101: it was the envelope,
        // and listed nowhere; functions/auth/openapi.ts lists it for organization create and update).
        if (isUniqueViolation(err)) {
          throw new APIError('CONFLICT', {
            code: 'CONFLICT',
            message: 'Another request just wrote the same unique value (e.g. an organization slug); choose another and retry',
          });
        }
        // set-role, update-user, ban-user and remove-user check the caller, then write: of two admins taking each other
        // away at once, the database refuses the later write (migration 20261127000400), 422 as on our routes.
        if (isLastAdminRefusal(err)) throw lastAdminRefused();
        // leave, remove-member and update-member-role count an organization's owners, then write: of two owners
        // leaving (or removing each other) at once, the database refuses the later write (migration
        // 20261127000800), answered as the plugin answers a lone owner leaving (organization-owners.ts).
        if (isOrganizationOwnerRefusal(err)) throw organizationOwnerRefused(err);
        if (isAPIError(err) && err.status !== 'INTERNAL_SERVER_ERROR') return;
        logger.error('better-auth: request failed', { err });
      },
    },
    advanced: {
      // Always check Origin on cookie-carrying writes (the library skips the check under NODE_ENV=test,
      // which would hide exactly the behaviour the tests must see). Requests without cookies (agent
      // backends signing in) carry no Origin and pass: the check only applies when a cookie is sent.
      disableOriginCheck: false,
      disableCSRFCheck: false,
      useSecureCookies: config.isProduction || https,
      defaultCookieAttributes: config.isProduction
        ? { httpOnly: true, secure: true, sameSite: 'none' }
        : { httpOnly: true, secure: https, sameSite: 'lax' },
      database: { generateId: () => crypto.randomUUID() },
    },
    // Email verification (contract.md, Trust boundaries): sign-up mails a link to GET /api/auth/verify-email;
    // POST /api/auth/send-verification-email { email } sends it again. Unverified accounts may sign in; what an
    // address proves (invitations, anonymous purchases) waits for `emailVerified`.
    emailVerification: {
      sendOnSignUp: true,
      autoSignInAfterVerification: false,
      expiresIn: 24 * 60 * 60,
      sendVerificationEmail: ({ user, url, token }) =>
        afterLibraryCommit(async () => {
          if (!(await mayMailRecipient(deps, user.email, 'verification'))) return;
          await mailer.enqueue(database.db, verificationMail(config, user.email, verificationLink(config, url, token)));
        }),
    },
    emailAndPassword: {
      enabled: true,
      // Sign-up does not sign in, and answers an address that already has an account exactly as a new one
      // (200, `token: null`, a user record with a fresh id; the library's enumeration protection, on because
      // autoSignIn is false); the owner of that address gets a mail instead (at most one an hour, counted apart from
      // the reset and verification links, which strangers' sign-ups must not use up: recipient-allowance.ts). The new
      // user signs in next.
      autoSignIn: false,
      requireEmailVerification: false,
      ...(deps.passwordHashing ? { password: deps.passwordHashing } : {}),
      onExistingUserSignUp: ({ user }) =>
        afterLibraryCommit(async () => {
          if (!(await mayMailRecipient(deps, user.email, 'existing-account sign-up'))) return;
          await mailer.enqueue(database.db, existingAccountSignUpMail(config, user.email));
        }),
      // The library's made-up user for an existing address carries the admin plugin's fields too, as a real
      // new user's record does, so the two answers have the same keys.
      customSyntheticUser: ({ coreFields, additionalFields, id }) => ({
        ...coreFields,
        role: 'user',
        banned: false,
        banReason: null,
        banExpires: null,
        ...additionalFields,
        id,
      }),
      minPasswordLength: 8,
      maxPasswordLength: 128,
      // A reset or change ends every session, refresh token and access token of the user (contract.md, Trust
      // boundaries): the `account_password_change_revokes_credentials` trigger (migration 20261123000401) does it
      // for every path that writes a password, as the ban trigger does for bans. This flag is the library's own half.
      revokeSessionsOnPasswordReset: true,
      // The reset link went to the mailbox, so using it proves the address: the mailbox's owner takes the account
      // back here (an account someone else made with the address, email-verification.ts; or one a thief held). After
      // the password trigger ended every session and token of the account, public.mailbox_takes_account_back
      // (migration 20261127000700) verifies the address and ends every OAuth consent of the account with the tokens
      // issued under it: a consent given by whoever held the account before is not the owner's, and it let that
      // agent sign the owner in silently (`prompt=none`) once they signed in (review 05). Every reset, of a verified
      // account too: a thief may have consented from a stolen session or password, and a reset is how the owner
      // recovers; the cost is one consent screen per agent, which has to send the user through authorize anyway.
      onPasswordReset: async ({ user }) => {
        await sql`select public.mailbox_takes_account_back(${user.id})`.execute(database.db);
      },
      resetPasswordTokenExpiresIn: 60 * 60,
      // A mailed link ends the user's mailed reset links made before it, in one transaction with queuing its mail
      // (the library only adds a row per request, so every link mailed within the hour kept working after a newer one
      // was asked for; review 17). Ended when the newer mail goes, not when its row is written: a request whose mail
      // the address's allowance holds back must not end the link its owner already has (anyone may ask for a reset of
      // any address). Only mailed links (public.reset_link_mailed, migration 20261127003500): a purchase claim's
      // set-password token, stored as a reset token but never mailed, stays (review 18: anyone's reset request broke
      // the claimant's set-password step).
      sendResetPassword: ({ user, url, token }) =>
        afterLibraryCommit(async () => {
          if (!(await mayMailRecipient(deps, user.email, 'password reset'))) return;
          await database.db.transaction().execute(async (trx) => {
            await sql`select public.reset_link_mailed(${user.id}, ${`reset-password:${token}`})`.execute(trx);
            await mailer.enqueue(trx, {
              to: user.email,
              subject: PASSWORD_RESET_SUBJECT,
              text:
                `Someone (hopefully you) asked to reset the password of ${user.email}.\n\n` +
                `Open this link within an hour to choose a new password:\n${passwordResetLink(config, url)}\n\n` +
                `If it wasn't you, ignore this mail: your password stays as it is.\n`,
            });
          });
        }),
    },
    hooks: {
      // change-password: the trigger ends every session, the caller's too, so the library is told to start a
      // new one for the caller (revokeOtherSessions), which it sets as the cookie of the answer; otherwise the
      // caller would be left holding a cookie that no longer works after "success".
      before: createAuthMiddleware(async (ctx) => {
        refuseBadLibraryInput(ctx.path, ctx.body, ctx.query);
        // (Only the flag: the library merges the returned body into the request's, and merging a copy of the whole
        // body walked every level of it: a body nested 20,000 deep overflowed the stack, a 500; found by a review.)
        if (ctx.path === '/change-password' && ctx.body && typeof ctx.body === 'object') {
          return { context: { body: { revokeOtherSessions: true } } };
        }
        if (ctx.path === '/organization/invite-member' && ctx.body && typeof ctx.body === 'object') {
          // Who may invite, how often, and how often an address is invited (invitation-rules.ts), judged and taken
          // here, before the plugin's route: it cancels the pending invitation a re-invite replaces before its own
          // beforeCreateInvitation hook, so a refusal there killed the invitee's link (review 17). With the caller
          // and the body as the route reads them (no session, no organization or no address: its own refusal).
          const body = ctx.body as { email?: unknown; role?: unknown; organizationId?: unknown };
          const session = await getSessionFromCtx(ctx);
          const organizationId = body.organizationId || session?.session.activeOrganizationId;
          const role = Array.isArray(body.role) ? body.role.join(',') : body.role; // (as the plugin's parseRoles)
          if (session && typeof organizationId === 'string' && typeof body.email === 'string' && typeof role === 'string') {
            await takeInvitationBeforeTheRoute(deps, session.user, { organizationId, email: body.email, role });
          }
          // `resend`: the library would mail the pending invitation again without creating one, past the per-inviter
          // limit; without the flag it replaces the invitation (cancelPendingInvitationsOnReInvite) with a new one,
          // counted as any. (The returned body is merged into the request's, so the flag is set to false, not removed.)
          if ('resend' in ctx.body) return { context: { body: { resend: false } } };
        }
      }),
      // invite-member refused by the plugin after the call was taken for (an invalid address, someone already a
      // member): what it took is given back, so a refused call uses up nothing (invitation-rules.ts).
      after: createAuthMiddleware(async (ctx) => {
        if (ctx.path === '/organization/invite-member' && isAPIError(ctx.context.returned)) await giveBackRefusedInvitation(deps);
      }),
    },
    plugins: [
      admin({
        ac: accessControl,
        roles,
        defaultRole: 'user',
        adminRoles: ['platform_admin'],
        bannedUserMessage: 'This account is banned. Contact the marketplace operator.',
      }),
      organization({
        // Accepting, rejecting or reading an invitation by id needs a verified email (contract.md, Trust
        // boundaries): said here, not left to the library's default (which depends on how ids are generated).
        requireEmailVerificationOnInvitation: true,
        // Inviting an address again replaces its pending invitation with a new one, which counts against the
        // inviter's daily limit; a `resend` is made exactly that (hooks.before), so no invitation mail is uncounted.
        // The plugin looks for the pending one, then writes, with nothing between: the database replaces it under a
        // lock per (organization, address), so two sent at once leave one pending (review 24, migration 20261127004100).
        cancelPendingInvitationsOnReInvite: true,
        // At most OWNED_ORGANIZATIONS owned and ORGANIZATIONS_PER_DAY created per account, ORGANIZATIONS_PER_ADDRESS_PER_DAY
        // per client address (organization-limits.ts).
        organizationLimit: (user) => ownsMostOrganizations(database, user),
        organizationHooks: {
          beforeCreateOrganization: async ({ user }) => {
            await takeOrganizationCreation(deps, user);
          },
          // The plugin deletes an organization's members first, then the organization: its first step would take the
          // only owner away, which the database refuses (organization_keeps_an_owner, migration 20261127000800). The
          // organization row goes first here instead, its members and invitations with it by their foreign keys'
          // cascade, which the rule lets through; the plugin's own deletes then find nothing left.
          beforeDeleteOrganization: async ({ organization }) => {
            await sql`delete from "organization" where id = ${organization.id}`.execute(database.db);
          },
          // Taken in hooks.before already (verified inviters only, INVITATIONS_PER_DAY per inviter, an hourly allowance
          // per invited address, roles exactly as the plugin's checks read them: invitation-rules.ts); here only for an
          // invitation that call took nothing for (its inviter's role changed between the two looks).
          beforeCreateInvitation: async ({ inviter, invitation }) => {
            await takeInvitation(deps, inviter, invitation);
          },
          beforeUpdateMemberRole: async ({ newRole }) => assertWellFormedRole(newRole),
          beforeAddMember: async ({ member }) => assertWellFormedRole(member.role),
          // An invitation stands only while its inviter may still send it (a standing member in a role that may):
          // the plugin's get-invitation checks the membership, its accept-invitation nothing (invitation-rules.ts).
          beforeAcceptInvitation: async ({ invitation }) => {
            assertWellFormedRole(invitation.role);
            await assertInviterStands(database.db, invitation);
          },
        },
        // A fixed subject: the organization's and the inviter's names are user text, quoted in the body only.
        sendInvitationEmail: async (data) => {
          await mailer.enqueue(
            database.db,
            invitationMail(config, {
              id: data.id,
              email: data.email,
              role: data.role,
              organizationName: data.organization.name,
              inviterName: data.inviter.user.name,
              inviterEmail: data.inviter.user.email,
            }),
          );
        },
      }),
      jwt({
        jwt: { issuer: libraryBaseUrl(config), audience: config.publicBaseUrl, expirationTime: '10h' },
        // No extra signing per get-session: bearer tokens come from the OAuth token endpoint only.
        disableSettingJwtHeader: true,
      }),
      oauthProvider(oauthProviderOptions(config)),
      // Only for auth.api.generateOpenAPISchema(), which our /openapi.json merges (http/auth-openapi.ts); its two
      // HTTP endpoints are disabled (disabledPaths above).
      openAPI({ disableDefaultReference: true }),
    ],
  } satisfies BetterAuthOptions;
}

export function createAuth(deps: AuthDeps) {
  return betterAuth(authOptions(deps));
}

export type Auth = ReturnType<typeof createAuth>;
