import type { z } from '@hono/zod-openapi';
import { notFound } from '../http/errors.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { capabilitySchema } from './schemas.ts';
import { iso } from './schemas.ts';

/**
 * Capabilities and how-it-works steps: two ordered lists of the same shape (title, description, position).
 * Positions are 1-based and kept dense (1..n): adding at a position or moving an item renumbers the list in
 * the same transaction, so the order a reader sees is always exactly the order an admin set.
 */

export type ContentKind = 'capabilities' | 'steps';
export type ContentItem = z.infer<typeof capabilitySchema>;

const tableOf = (kind: ContentKind) => sql.table(kind === 'capabilities' ? 'public.agent_capabilities' : 'public.agent_steps');
const label = (kind: ContentKind) => (kind === 'capabilities' ? 'Capability' : 'Step');

interface Row {
  id: string;
  agentId: string;
  position: number;
  title: string;
  description: string;
  createdAt: Date | string;
  updatedAt: Date | string;
}

const columns = sql`id, agent_id as "agentId", position, title, description, created_at as "createdAt", updated_at as "updatedAt"`;

const toItem = (r: Row): ContentItem => ({
  id: r.id,
  agentId: r.agentId,
  position: r.position,
  title: r.title,
  description: r.description,
  createdAt: iso(r.createdAt),
  updatedAt: iso(r.updatedAt),
});

export async function listContent(db: Db, kind: ContentKind, agentId: string): Promise<ContentItem[]> {
  const found = await rows<Row>(
    db,
    sql`select ${columns} from ${tableOf(kind)} where agent_id = ${agentId} order by position, created_at, id`,
  );
  return found.map(toItem);
}

/** Replaces the whole list (agent create/update). Inside the caller's transaction. */
/** Which list of which agent: the target of every content write. */
export interface ContentList {
  kind: ContentKind;
  agentId: string;
}

export async function replaceContent(
  trx: Db,
  now: Date,
  { kind, agentId, items }: ContentList & { items: Array<{ title: string; description?: string | undefined }> },
): Promise<void> {
  await sql`delete from ${tableOf(kind)} where agent_id = ${agentId}`.execute(trx);
  if (items.length === 0) return;
  const payload = JSON.stringify(items.map((i) => ({ title: i.title, description: i.description ?? '' })));
  await sql`insert into ${tableOf(kind)} (agent_id, position, title, description, created_at, updated_at)
            select ${agentId}, e.ord, e.item ->> 'title', e.item ->> 'description', ${now}, ${now}
            from jsonb_array_elements(${payload}::text::jsonb) with ordinality as e(item, ord)`.execute(trx);
}

/** Writes positions 1..n in the order of `ids` (one statement). */
async function renumber(trx: Db, kind: ContentKind, ids: string[]): Promise<void> {
  if (ids.length === 0) return;
  await sql`update ${tableOf(kind)} t set position = o.ord
            from jsonb_array_elements_text(${JSON.stringify(ids)}::text::jsonb) with ordinality as o(id, ord)
            where t.id = o.id::uuid and t.position is distinct from o.ord`.execute(trx);
}

async function orderedIds(trx: Db, kind: ContentKind, agentId: string): Promise<string[]> {
  // `for update` serializes concurrent edits of one agent's list, so two inserts cannot both take slot n+1.
  const found = await rows<{ id: string }>(
    trx,
    sql`select id from ${tableOf(kind)} where agent_id = ${agentId} order by position, created_at, id for update`,
  );
  return found.map((r) => r.id);
}

const clampSlot = (position: number | undefined, length: number) =>
  position === undefined ? length : Math.min(Math.max(position - 1, 0), length);

export async function addContent(
  db: Db,
  now: Date,
  { kind, agentId, item }: ContentList & { item: { title: string; description?: string | undefined; position?: number | undefined } },
): Promise<ContentItem> {
  return db.transaction().execute(async (trx) => {
    // Lock the agent row: the parent of the list, so even the first item of an empty list is serialized.
    const agent = await first(trx, sql`select id from public.agents where id = ${agentId} for update`);
    if (!agent) throw notFound('Agent', { agentId });
    const ids = await orderedIds(trx, kind, agentId);
    const inserted = await first<{ id: string }>(
      trx,
      sql`insert into ${tableOf(kind)} (agent_id, position, title, description, created_at, updated_at)
          values (${agentId}, ${ids.length + 1}, ${item.title}, ${item.description ?? ''}, ${now}, ${now})
          returning id`,
    );
    ids.splice(clampSlot(item.position, ids.length), 0, inserted!.id);
    await renumber(trx, kind, ids);
    return (await getContent(trx, kind, agentId, inserted!.id))!;
  });
}

async function getContent(db: Db, kind: ContentKind, agentId: string, id: string): Promise<ContentItem | undefined> {
  const row = await first<Row>(db, sql`select ${columns} from ${tableOf(kind)} where id = ${id} and agent_id = ${agentId}`);
  return row ? toItem(row) : undefined;
}

export async function updateContent(
  db: Db,
  now: Date,
  { kind, agentId, id, patch }: ContentList & {
    id: string;
    patch: { title?: string | undefined; description?: string | undefined; position?: number | undefined };
  },
): Promise<ContentItem> {
  return db.transaction().execute(async (trx) => {
    await first(trx, sql`select id from public.agents where id = ${agentId} for update`);
    const updated = await first<{ id: string }>(
      trx,
      sql`update ${tableOf(kind)} set title = coalesce(${patch.title ?? null}, title),
            description = coalesce(${patch.description ?? null}, description), updated_at = ${now}
          where id = ${id} and agent_id = ${agentId} returning id`,
    );
    if (!updated) throw notFound(label(kind), { id });
    if (patch.position !== undefined) {
      const ids = (await orderedIds(trx, kind, agentId)).filter((x) => x !== id);
      ids.splice(clampSlot(patch.position, ids.length), 0, id);
      await renumber(trx, kind, ids);
    }
    return (await getContent(trx, kind, agentId, id))!;
  });
}

export async function deleteContent(db: Db, kind: ContentKind, agentId: string, id: string): Promise<{ id: string }> {
  return db.transaction().execute(async (trx) => {
    await first(trx, sql`select id from public.agents where id = ${agentId} for update`);
    const deleted = await first<{ id: string }>(
      trx,
      sql`delete from ${tableOf(kind)} where id = ${id} and agent_id = ${agentId} returning id`,
    );
    if (!deleted) throw notFound(label(kind), { id });
    await renumber(trx, kind, await orderedIds(trx, kind, agentId));
    return deleted;
  });
}
