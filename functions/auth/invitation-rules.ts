import { AsyncLocalStorage } from 'node:async_hooks';
import { defineRequestState } from '@better-auth/core/context';
import { APIError } from '@better-auth/core/error';
import type { Clock } from '../platform/clock.ts';
import { first, sql, type Db } from '../platform/db.ts';
import { refundToken, takeToken } from '../platform/rate-limits.ts';
import { libraryRateLimited } from './library-errors.ts';
import { mailboxKey } from './recipient-allowance.ts';

type RulesDeps = { database: { db: Db }; clock: Clock };

/**
 * Who may send organization invitations (issue 10 finding 8: invitations relayed phishing). An invitation is a
 * mail the marketplace sends to any address, carrying text the inviter chose, so:
 *   * only an inviter whose own address is verified may invite (403 EMAIL_NOT_VERIFIED);
 *   * an inviter sends at most INVITATIONS_PER_DAY invitations in any 24 hours, across all their organizations
 *     (429 RATE_LIMITED with Retry-After), counted in PostgreSQL, so every instance and every restart agrees. A
 *     "resend" is made a new invitation (better-auth.ts), so it counts too;
 *   * one address gets at most INVITATIONS_PER_ADDRESS_PER_HOUR invitations an hour (below).
 * The count per inviter takes a claim (public.invitation_claim, migration 20261125000700): the count and the claim are
 * one step under a lock per inviter, and writing the invitation consumes the claim, so invitations sent all at once
 * stop at the limit too. The errors are the library's (its JSON shape).
 *
 * All of it runs before the plugin's invite-member route (takeInvitationBeforeTheRoute, from hooks.before in
 * better-auth.ts), in this order: a refusal that needs no allowance (a malformed role, an inviter who may not send it,
 * an unverified inviter) comes before any allowance is taken, and a refused call takes nothing, or gives back what it
 * took. Found by review 17: the checks ran in the plugin's beforeCreateInvitation hook, the address's allowance first,
 * so unverified accounts, each refused 403, used up an address's hour and a real organization's invitation to it was
 * refused 429; and the plugin cancels the pending invitation a re-invite replaces before that hook runs, so a refused
 * re-invite (or "resend") killed the invitee's link while its inviter was told nothing was done.
 */
export const INVITATIONS_PER_DAY = 20;
const WINDOW_MS = 24 * 60 * 60 * 1000;

/**
 * How many invitations one address is mailed: at most INVITATIONS_PER_ADDRESS_PER_HOUR an hour from everyone, and
 * at most INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR of those from one inviter (found by reviews: without the
 * first, many verified accounts mailed one address without end; with only the first, one account re-inviting an
 * address to its own organization used up the address's hour, and a real organization's invitation went unmailed
 * with the same 200). Past either, the invitation is refused before it is made, 429 RATE_LIMITED with Retry-After,
 * so its inviter knows it did not go. Counted in PostgreSQL (public.rate_limits) per mailbox (mailboxOf in
 * recipient-allowance.ts: `victim+1@`, `victim+2@`, ... are one inbox; review 33), under its SHA-256, never the
 * address; apart from the mailbox's account mails, so invitations cannot use up the hour in which its owner asks for a
 * password reset.
 */
export const INVITATIONS_PER_ADDRESS_PER_HOUR = 10;
export const INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR = 2;
const HOUR_MS = 60 * 60 * 1000;

/** What this call took for its invitation (the library's request state): given back if the call is refused after all. */
interface Taken {
  inviterId: string;
  addressKeys: string[];
}
const takenByThisCall = defineRequestState<Taken | null>(() => null);

/**
 * An invitation call the database refused at the invitation's insert (the pending-invitation limit, migration
 * 20261127006800): the library's route then fails with the database's error, so its hooks.after never runs and gives
 * nothing back. Its error hook marks the call (`invitationRefusedAtInsert`, better-auth.ts onAPIError), and the HTTP
 * middleware around the route (`answeringInvitation`, mount.ts) gives back what the call took once the library has
 * answered. (The library's request state, where the rest of this file keeps what a call took, ends with its endpoint;
 * its error hook runs after that, so this store is the HTTP request's.)
 */
const invitationCall = new AsyncLocalStorage<{ taken: Taken | null; refusedAtInsert: boolean }>();

/** Runs `answer` (the library answering POST /organization/invite-member) and gives back a call refused at its insert. */
export async function answeringInvitation<T>(deps: RulesDeps, answer: () => Promise<T>): Promise<T> {
  const call = { taken: null as Taken | null, refusedAtInsert: false };
  try {
    return await invitationCall.run(call, answer);
  } finally {
    if (call.refusedAtInsert && call.taken) await giveBack(deps, call.taken);
  }
}

/** The library's error hook met the database's refusal of this call's invitation. */
export function invitationRefusedAtInsert(): void {
  const call = invitationCall.getStore();
  if (call) call.refusedAtInsert = true;
}

interface Inviter {
  id: string;
  emailVerified: boolean;
}
interface InvitationToBe {
  organizationId: string;
  email: string;
  role: string;
}

/**
 * hooks.before of /organization/invite-member, with the caller and the body as the plugin's route reads them (before
 * it cancels the pending invitation a re-invite replaces, so a refusal here leaves that invitation standing). An
 * invitation its inviter may not send (not a standing member of the organization in a role that may send it:
 * public.invitation_stands) is the plugin's to refuse, in its own words (MEMBER_NOT_FOUND, ...), before it writes
 * anything: nothing is taken for it.
 */
export async function takeInvitationBeforeTheRoute(deps: RulesDeps, inviter: Inviter, invitation: InvitationToBe): Promise<void> {
  assertWellFormedRole(invitation.role);
  const may = await first<{ stands: boolean }>(
    deps.database.db,
    sql`select public.invitation_stands(${invitation.organizationId}, ${inviter.id}, ${invitation.role}) as stands`,
  );
  if (!may?.stands) return;
  await takeInvitation(deps, inviter, invitation);
}

/**
 * Takes what one invitation uses up, once per call: refuses an unverified inviter (nothing taken yet), then the
 * address's hourly allowances, then the inviter's daily claim (the address's tokens given back when that refuses).
 * Also the beforeCreateInvitation hook's, for an invitation the plugin is about to write that the call took nothing
 * for yet (its inviter's role changed between the two looks): so every invitation made has taken its allowance.
 */
export async function takeInvitation(deps: RulesDeps, inviter: Inviter, invitation: InvitationToBe): Promise<void> {
  if (await takenByThisCall.get()) return;
  assertWellFormedRole(invitation.role);
  if (!inviter.emailVerified) {
    throw new APIError('FORBIDDEN', {
      code: 'EMAIL_NOT_VERIFIED',
      message: 'Confirm your email address before inviting anyone: open the link we mailed you, or ask for a new one',
    });
  }
  const addressKeys = await takeAddressAllowance(deps, inviter.id, invitation.email);
  try {
    await claimDailyInvitation(deps, inviter.id);
  } catch (err) {
    for (const key of addressKeys) await refundToken(deps, key);
    throw err;
  }
  const taken = { inviterId: inviter.id, addressKeys };
  await takenByThisCall.set(taken);
  const call = invitationCall.getStore();
  if (call) call.taken = taken;
}

/**
 * hooks.after of /organization/invite-member: the plugin refused the call after it was taken for (an invalid address,
 * someone already a member, ...): the address's tokens and the inviter's claim go back.
 */
export async function giveBackRefusedInvitation(deps: RulesDeps): Promise<void> {
  const taken = await takenByThisCall.get();
  if (!taken) return;
  await takenByThisCall.set(null);
  const call = invitationCall.getStore();
  if (call) call.taken = null;
  await giveBack(deps, taken);
}

async function giveBack(deps: RulesDeps, taken: Taken): Promise<void> {
  for (const key of taken.addressKeys) await refundToken(deps, key);
  await sql`select public.invitation_claim_give_back(${taken.inviterId}, ${deps.clock.now()})`.execute(deps.database.db);
}

/** The address's two hourly allowances; returns the keys taken (none is kept when either refuses). */
async function takeAddressAllowance(deps: RulesDeps, inviterId: string, email: string): Promise<string[]> {
  const address = await mailboxKey(email);
  const fromInviterKey = `invite-from|${inviterId}|${address}`;
  const fromInviter = await takeToken(deps, fromInviterKey, INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR, HOUR_MS);
  const verdict = fromInviter.allowed ? await takeToken(deps, `invite-to|${address}`, INVITATIONS_PER_ADDRESS_PER_HOUR, HOUR_MS) : fromInviter;
  if (verdict.allowed) return [fromInviterKey, `invite-to|${address}`];
  if (fromInviter.allowed) await refundToken(deps, fromInviterKey);
  throw libraryRateLimited(
    `This address may get ${INVITATIONS_PER_ADDRESS_PER_INVITER_PER_HOUR} invitations an hour from one inviter and ` +
      `${INVITATIONS_PER_ADDRESS_PER_HOUR} from everyone; try again later`,
    verdict.retryAfterSec,
  );
}

/** The inviter's claim on one of their INVITATIONS_PER_DAY. */
async function claimDailyInvitation(deps: RulesDeps, inviterId: string): Promise<void> {
  const now = deps.clock.now();
  const row = await first<{ retry_at: Date | string | null }>(
    deps.database.db,
    sql`select public.invitation_claim(${inviterId}, ${now}, ${INVITATIONS_PER_DAY}) as retry_at`,
  );
  if (!row?.retry_at) return;
  // (The library stamps invitations with the real time; the service clock may differ a little: bounded by the window.)
  const retryAfterSec = Math.min(WINDOW_MS / 1000, Math.max(1, Math.ceil((new Date(row.retry_at).getTime() - now.getTime()) / 1000)));
  throw libraryRateLimited(`You can send ${INVITATIONS_PER_DAY} invitations a day; try again later`, retryAfterSec, {
    limitPerDay: INVITATIONS_PER_DAY,
  });
}

/** The organization roles: the plugin's defaults (no custom roles are configured). */
const ORGANIZATION_ROLES = new Set(['owner', 'admin', 'member']);

/**
 * A role as the organization plugin stores it: one role name, or several joined by commas, and nothing else. The
 * plugin checks "only an owner may make an owner" on the role split by commas WITHOUT trimming, but validates roles
 * and reads the caller's role WITH trimming, so an admin inviting "admin, owner" (or ["admin", " owner"]) passed
 * the first check and made a member every later check took for an owner: one who could invite a real owner, who
 * removed the original one (found by a review). A role that is not exactly well formed is refused (400
 * INVALID_ROLE) wherever one is written or taken: an invitation, a role change, adding a member, and accepting an
 * invitation stored before this rule.
 */
export function assertWellFormedRole(role: unknown): void {
  const names = typeof role === 'string' ? role.split(',') : [];
  if (names.length === 0 || names.some((name) => !ORGANIZATION_ROLES.has(name)) || new Set(names).size !== names.length) {
    throw new APIError('BAD_REQUEST', {
      code: 'INVALID_ROLE',
      message: 'role must be owner, admin or member (several as one comma-separated list without spaces, each once)',
    });
  }
}

/**
 * An invitation stands only while its inviter may still send it: a member of its organization, not banned, in a role
 * that may send an invitation of that role (owner or admin; an owner invitation needs an owner). The rule lives once,
 * in public.invitation_stands (migration 20261127001600). The plugin's get-invitation already refused an invitation
 * whose inviter had left, but its accept-invitation never looked: a removed (or banned) admin's pending invitation
 * still let their second account join as admin, and so did one of an admin demoted to member since (found by reviews,
 * the second by review 10). Refused as get-invitation refuses it, 400
 * INVITER_IS_NO_LONGER_A_MEMBER_OF_THE_ORGANIZATION. (The database also cancels a member's pending invitations when
 * the membership ends, the role changes, the account is banned or taken back by a password reset; an acceptance
 * racing that cancellation is refused by the plugin's own pending -> accepted update.)
 */
export async function assertInviterStands(db: Db, invitation: { organizationId: string; inviterId: string; role: string }): Promise<void> {
  const row = await first<{ stands: boolean }>(
    db,
    sql`select public.invitation_stands(${invitation.organizationId}, ${invitation.inviterId}, ${invitation.role}) as stands`,
  );
  if (row?.stands) return;
  throw new APIError('BAD_REQUEST', {
    code: 'INVITER_IS_NO_LONGER_A_MEMBER_OF_THE_ORGANIZATION',
    message: 'Inviter is no longer a member of the organization',
  });
}
