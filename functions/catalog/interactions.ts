import type { z } from '@hono/zod-openapi';
import { afterCursor, finishPage, pageScope, readPage, type CursorSigner } from '../http/pagination.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { interactionSchema, interactionTypeSchema } from './schemas.ts';
import { iso } from './schemas.ts';

/** The interaction feed admins read: sign-ups, installs, demo requests, enterprise inquiries, waitlist sign-ups. */

export type Interaction = z.infer<typeof interactionSchema>;
export type InteractionType = z.infer<typeof interactionTypeSchema>;

interface Row {
  id: string;
  type: InteractionType;
  userId: string | null;
  agentId: string | null;
  metadata: Record<string, unknown> | string;
  createdAt: Date | string;
}
const columns = sql`id, type, user_id as "userId", agent_id as "agentId", metadata, created_at as "createdAt"`;
const toInteraction = (r: Row): Interaction => ({
  ...r,
  metadata: typeof r.metadata === 'string' ? JSON.parse(r.metadata) : r.metadata,
  createdAt: iso(r.createdAt),
});

export async function recordInteraction(
  db: Db,
  input: { type: InteractionType; userId: string | null; agentId: string | null; metadata?: Record<string, unknown> },
  now: Date,
): Promise<Interaction> {
  const row = await first<Row>(
    db,
    sql`insert into public.interactions (type, user_id, agent_id, metadata, created_at)
        values (${input.type}, ${input.userId}, ${input.agentId}, ${JSON.stringify(input.metadata ?? {})}::text::jsonb, ${now})
        returning ${columns}`,
  );
  return toInteraction(row!);
}

export async function listInteractions(
  db: Db,
  cursors: CursorSigner,
  query: { type?: InteractionType | undefined; cursor?: string | undefined; limit?: number | undefined },
) {
  const page = await readPage(cursors, pageScope('admin/interactions', { type: query.type }), query);
  const byType = query.type ? sql`type = ${query.type}` : sql`true`;
  const found = await rows<Row>(
    db,
    sql`select ${columns} from public.interactions
        where ${byType} and ${afterCursor(page)}
        order by created_at desc, id desc limit ${page.limit + 1}`,
  );
  return finishPage(cursors, page, found.map(toInteraction));
}
