import type { z } from '@hono/zod-openapi';
import { notFound } from '../http/errors.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { changelogEntrySchema } from './schemas.ts';
import { iso } from './schemas.ts';

/** An agent's changelog: release notes, newest first. */

export type ChangelogEntry = z.infer<typeof changelogEntrySchema>;

interface Row {
  id: string;
  agentId: string;
  version: string;
  title: string | null;
  body: string;
  createdAt: Date | string;
}

const columns = sql`id, agent_id as "agentId", version, title, body, created_at as "createdAt"`;
const toEntry = (r: Row): ChangelogEntry => ({ ...r, createdAt: iso(r.createdAt) });

export async function listChangelog(db: Db, agentId: string): Promise<ChangelogEntry[]> {
  const found = await rows<Row>(
    db,
    sql`select ${columns} from public.agent_changelog_entries where agent_id = ${agentId} order by created_at desc, id desc`,
  );
  return found.map(toEntry);
}

export async function addChangelogEntry(
  db: Db,
  agentId: string,
  input: { version: string; title?: string | undefined; body?: string | undefined },
  now: Date,
): Promise<ChangelogEntry> {
  const row = await first<Row>(
    db,
    sql`insert into public.agent_changelog_entries (agent_id, version, title, body, created_at)
        select id, ${input.version}, ${input.title || null}, ${input.body ?? ''}, ${now} from public.agents where id = ${agentId}
        returning ${columns}`,
  );
  if (!row) throw notFound('Agent', { agentId });
  return toEntry(row);
}

export async function deleteChangelogEntry(db: Db, agentId: string, entryId: string): Promise<{ id: string }> {
  const row = await first<{ id: string }>(
    db,
    sql`delete from public.agent_changelog_entries where id = ${entryId} and agent_id = ${agentId} returning id`,
  );
  if (!row) throw notFound('Changelog entry', { entryId });
  return row;
}
