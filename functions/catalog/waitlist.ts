import { ApiError } from '../http/errors.ts';
import { first, sql, type Db } from '../platform/db.ts';
import type { AgentStatus } from './schemas.ts';
import { iso } from './schemas.ts';
import { accountGone, heldUser } from './held-user.ts';

/**
 * The waitlist of a coming-soon agent: (agent, email) pairs, emails lower-cased. Joining twice is not an
 * error (the second call answers 200) and records the `waitlist_signup` interaction only once. Joining the waitlist
 * of an agent that is not coming soon is 422 INVALID_STATE: there is nothing to wait for (an active agent can be installed or bought right away).
 */

export interface WaitlistEntry {
  agentId: string;
  email: string;
  notified: true;
  /** When the entry was made; for a duplicate join, the time of that request (see joinWaitlist). */
  createdAt: string;
}

export async function joinWaitlist(
  db: Db,
  agent: { id: string; status: AgentStatus },
  input: { email: string; userId: string | null },
  now: Date,
): Promise<{ entry: WaitlistEntry; created: boolean }> {
  if (agent.status !== 'coming_soon') {
    throw new ApiError('INVALID_STATE', 'Only coming-soon agents have a waitlist', { status: agent.status });
  }
  const email = input.email.trim().toLowerCase();
  // A signed-in caller's row is held for the statement (held-user.ts): a removal of the caller either waits and then
  // finds this entry, or has ended and nothing is written (401; the interaction's foreign key answered 500).
  const signedIn = input.userId !== null;
  const row = await first<{ createdAt: Date | string | null; standing: boolean }>(
    db,
    sql`with author as (${heldUser(input.userId)}), added as (
          insert into public.waitlist_entries (agent_id, email, user_id, created_at)
          select ${agent.id}, ${email}, ${input.userId}, ${now}
           where not ${signedIn} or exists (select 1 from author)
          on conflict (agent_id, email) do nothing
          returning created_at
        ), noted as (
          insert into public.interactions (type, user_id, agent_id, metadata, created_at)
          select 'waitlist_signup', ${input.userId}, ${agent.id}, jsonb_build_object('email', ${email}::text), ${now} from added
        )
        select (select created_at from added) as "createdAt", not ${signedIn} or exists (select 1 from author) as standing`,
  );
  if (!row!.standing) throw accountGone();
  if (row!.createdAt) return { entry: { agentId: agent.id, email, notified: true, createdAt: iso(row!.createdAt) }, created: true };
  // Already on the list (`do nothing` returns no row only when the pair exists, committed, perhaps by a concurrent
  // join). The answer carries the time of this request, never the entry's own: joining is public and anonymous, and
  // the stored createdAt told whoever typed an address since when its owner had been waiting for this agent (found by
  // a review). The 200 itself is the contract's (duplicate -> 200).
  return { entry: { agentId: agent.id, email, notified: true, createdAt: iso(now) }, created: false };
}

/**
 * Whether the signed-in caller's email is on this agent's waitlist (false for anonymous callers). Only a verified
 * address counts: anyone may sign up with an address that is not theirs and never verify it, and that account read
 * which coming-soon agents the address's owner had asked to hear about (found by a review). Read from the user's row,
 * in one statement, so the answer follows the verification at once.
 */
export async function waitlistStatus(db: Db, agentId: string, userId: string | null): Promise<{ notified: boolean }> {
  if (!userId) return { notified: false };
  const row = await first<{ found: boolean }>(
    db,
    sql`select exists (select 1 from "user" u
                         join public.waitlist_entries w on w.agent_id = ${agentId} and w.email = lower(u.email)
                        where u.id = ${userId} and u."emailVerified") as found`,
  );
  return { notified: Boolean(row?.found) };
}
