import { ApiError } from '../http/errors.ts';
import { first, sql, type Db } from '../platform/db.ts';
import type { AgentStatus } from './schemas.ts';
import { accountGone, heldUser } from './held-user.ts';

/**
 * Installing an agent: counted once per user, however often (or however concurrently) it is called.
 * One statement: the install row is inserted if absent; only when that insert added a row is the counter
 * incremented and an `install` interaction written. Concurrent calls of one user wait on the primary key
 * and then find the row, so the count moves by exactly one. A caller removed meanwhile gets 401 and nothing is written.
 */
export async function installAgent(
  db: Db,
  agent: { id: string; status: AgentStatus },
  userId: string,
  now: Date,
): Promise<{ installs: number; installed: boolean }> {
  if (agent.status !== 'active') {
    throw new ApiError('INVALID_STATE', 'Only active agents can be installed', { status: agent.status });
  }
  // `author`: the user's row held for the statement's transaction (held-user.ts), so a removal of the user either
  // waits and then takes this install back with the others, or has ended and this writes nothing (401).
  const row = await first<{ installs: number; installed: boolean; standing: boolean }>(
    db,
    sql`with author as (${heldUser(userId)}), added as (
          insert into public.agent_installs (agent_id, user_id, created_at) select ${agent.id}, author.id, ${now} from author
          on conflict (agent_id, user_id) do nothing
          returning agent_id
        ), counted as (
          update public.agents set installs = installs + 1 where id in (select agent_id from added) returning installs
        ), noted as (
          insert into public.interactions (type, user_id, agent_id, metadata, created_at)
          select 'install', ${userId}, agent_id, '{}'::jsonb, ${now} from added
        )
        select coalesce((select installs from counted), (select installs from public.agents where id = ${agent.id})) as installs,
               exists (select 1 from added) as installed, exists (select 1 from author) as standing`,
  );
  if (!row!.standing) throw accountGone();
  if (row!.installed) return { installs: Number(row!.installs), installed: true };
  // Already installed. When a concurrent call of the same user inserted the row, this statement's snapshot
  // predates that commit; read the counter again so the answer includes it.
  const now2 = await first<{ installs: number }>(db, sql`select installs from public.agents where id = ${agent.id}`);
  return { installs: Number(now2!.installs), installed: false };
}
