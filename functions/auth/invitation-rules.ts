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
 * Two invitations sent at the very same moment may both pass the count (at most the requests in flight).
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
  const row = await first<{ n: number; oldest: Date | string | null }>(
    db,
    sql`select count(*)::int as n, min("createdAt") as oldest
          from invitation where "inviterId" = ${inviter.id} and "createdAt" > ${new Date(now.getTime() - WINDOW_MS)}`,
  );
  if ((row?.n ?? 0) < INVITATIONS_PER_DAY) return;
  const oldest = row?.oldest ? new Date(row.oldest).getTime() : now.getTime();
  // (The library stamps invitations with the real time; the service clock may differ a little: bounded by the window.)
  const retryAfterSec = Math.min(WINDOW_MS / 1000, Math.max(1, Math.ceil((oldest + WINDOW_MS - now.getTime()) / 1000)));
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
