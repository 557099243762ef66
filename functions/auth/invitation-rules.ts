import { APIError } from '@better-auth/core/error';
import type { Clock } from '../platform/clock.ts';
import { first, sql, type Db } from '../platform/db.ts';

/**
 * Who may send organization invitations (issue 10 finding 8: invitations relayed phishing). An invitation is a
 * mail the marketplace sends to any address, carrying text the inviter chose, so:
 *   * only an inviter whose own address is verified may invite (403 EMAIL_NOT_VERIFIED);
 *   * an inviter sends at most INVITATIONS_PER_DAY invitations in any 24 hours, across all their organizations
 *     (429 RATE_LIMITED with Retry-After), counted in PostgreSQL from the invitation table, so every instance
 *     and every restart agrees. A "resend" is made a new invitation (better-auth.ts), so it counts too.
 * Runs in the organization plugin's beforeCreateInvitation hook; the errors are the library's (its JSON shape).
 * The hook takes a claim (public.invitation_claim, migration 20261125000700): the count and the claim are one step
 * under a lock per inviter, and writing the invitation consumes the claim, so invitations sent all at once stop at
 * the limit too.
 */
export const INVITATIONS_PER_DAY = 20;
const WINDOW_MS = 24 * 60 * 60 * 1000;

export async function assertMayInvite(db: Db, clock: Clock, inviter: { id: string; emailVerified: boolean }): Promise<void> {
  if (!inviter.emailVerified) {
    throw new APIError('FORBIDDEN', {
      code: 'EMAIL_NOT_VERIFIED',
      message: 'Confirm your email address before inviting anyone: open the link we mailed you, or ask for a new one',
    });
  }
  const now = clock.now();
  const row = await first<{ retry_at: Date | string | null }>(
    db,
    sql`select public.invitation_claim(${inviter.id}, ${now}, ${INVITATIONS_PER_DAY}) as retry_at`,
  );
  if (!row?.retry_at) return;
  // (The library stamps invitations with the real time; the service clock may differ a little: bounded by the window.)
  const retryAfterSec = Math.min(WINDOW_MS / 1000, Math.max(1, Math.ceil((new Date(row.retry_at).getTime() - now.getTime()) / 1000)));
  throw new APIError(
    'TOO_MANY_REQUESTS',
    {
      code: 'RATE_LIMITED',
      message: `You can send ${INVITATIONS_PER_DAY} invitations a day; try again later`,
      retryAfterSec,
      limitPerDay: INVITATIONS_PER_DAY,
    },
    { 'Retry-After': String(retryAfterSec) },
  );
}
