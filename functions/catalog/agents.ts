import type { z } from '@hono/zod-openapi';
import { renameAgentClient } from '../auth/index.ts';
import { conflict, isUniqueViolation, notFound, pgConstraint } from '../http/errors.ts';
import { afterCursor, finishPage, pageScope, readPage, type CursorSigner } from '../http/pagination.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import { replaceContent, type ContentItem } from './agent-content.ts';
import type { ChangelogEntry } from './changelog.ts';
import type { agentSchema, agentSummarySchema, AgentStatus, listAgentsQuery } from './schemas.ts';
import { iso } from './schemas.ts';
import { setAgentTags } from './tags.ts';

/**
 * Agents: the slim list form and the full form, lookups that respect who may see what, and the writes.
 *
 * Visibility: `active` and `coming_soon` agents are published. `draft` (being prepared) and `inactive`
 * (soft-deleted) agents are visible to platform admins only: for everyone else they do not exist (404 on
 * every read, absent from lists, even when asked for by `status`).
 */

export type AgentSummary = z.infer<typeof agentSummarySchema>;
export type Agent = z.infer<typeof agentSchema>;

/**
 * Published = listed in the catalog. SQL owns the rule: `public.agent_is_published(status)` (migration
 * 20261125000100), which every policy, view and query calls; this is its one TypeScript mirror, for rows already
 * read, and tests/foundation/status-rules.test.ts checks that both agree on every status.
 */
export const PUBLISHED: readonly AgentStatus[] = ['active', 'coming_soon'];

export const isPublished = (status: AgentStatus) => PUBLISHED.includes(status);

interface AgentRow {
  id: string;
  slug: string;
  name: string;
  description: string;
  longDescription: string | null;
  status: AgentStatus;
  installs: number;
  reviewCount: number;
  averageRating: number | null;
  tags: Array<{ id: string; slug: string; name: string }> | string | null;
  createdAt: Date | string;
  updatedAt: Date | string;
}

/**
 * Selects agents (already narrowed and limited by `page`, a subquery aliased `a`) with their review
 * aggregates and tags. The aggregates run only for the rows of the page, so page N costs what page 1 costs, and they
 * are read from the tallies the database keeps of each agent's shown reviews (public.shown_review_totals, migration
 * 20261127004700), so an agent of 25,000 reviews costs what an agent of one costs (review 33: counting them here, asking
 * public.review_shown about each, took seconds).
 */
function withAggregates(pageRows: ReturnType<typeof sql>) {
  return sql<AgentRow>`
    select a.id, a.slug, a.name, a.description, a.long_description as "longDescription", a.status, a.installs,
           coalesce(r.review_count, 0)::integer as "reviewCount", r.average_rating as "averageRating",
           coalesce(tg.tags, '[]'::json) as tags,
           a.created_at as "createdAt", a.updated_at as "updatedAt"
    from (${pageRows}) a
    left join lateral public.shown_review_totals(a.id) r on true
    left join lateral (
      select json_agg(json_build_object('id', t.id, 'slug', t.slug, 'name', t.name) order by t.slug) as tags
      from public.agent_tags at join public.tags t on t.id = at.tag_id where at.agent_id = a.id
    ) tg on true
    order by a.created_at desc, a.id desc`;
}

function toSummary(row: AgentRow): AgentSummary {
  const tags = typeof row.tags === 'string' ? JSON.parse(row.tags) : (row.tags ?? []);
  return {
    id: row.id,
    slug: row.slug,
    name: row.name,
    description: row.description,
    status: row.status,
    installs: row.installs,
    reviewCount: Number(row.reviewCount),
    averageRating: row.averageRating === null ? null : Number(row.averageRating),
    tags,
    createdAt: iso(row.createdAt),
    updatedAt: iso(row.updatedAt),
  };
}

export interface ListAgentsInput {
  query: z.infer<typeof listAgentsQuery> & { cursor?: string | undefined; limit?: number | undefined };
  admin: boolean;
}

export async function listAgents(db: Db, cursors: CursorSigner, { query, admin }: ListAgentsInput) {
  // A filter given empty is none (schemas.ts), for the cursor's scope too.
  const status = query.status || undefined;
  const tag = query.tag || undefined;
  const q = query.q || undefined;
  const pricing = query.pricing || undefined;
  const page = await readPage(cursors, pageScope('agents', { view: admin ? 'admin' : 'public', status, tag, q, pricing }), query);
  const visible = admin ? sql`true` : sql`public.agent_is_published(a.status)`;
  const byStatus = status ? sql`a.status = ${status}` : sql`true`;
  const byTag = tag
    ? sql`exists (select 1 from public.agent_tags at join public.tags t on t.id = at.tag_id
                  where at.agent_id = a.id and t.slug = ${tag.toLowerCase()})`
    : sql`true`;
  const byText = q ? sql`a.search @@ websearch_to_tsquery('simple', ${q})` : sql`true`;
  const byPricing =
    pricing === 'free'
      ? sql`exists (select 1 from public.tiers t where t.agent_id = a.id and t.is_public and t.price_cents = 0)`
      : pricing === 'paid'
        ? sql`exists (select 1 from public.tiers t where t.agent_id = a.id and t.is_public and t.price_cents > 0)`
        : sql`true`;
  const pageRows = sql`
    select a.* from public.agents a
    where ${visible} and ${byStatus} and ${byTag} and ${byText} and ${byPricing} and ${afterCursor(page, 'a')}
    order by a.created_at desc, a.id desc
    limit ${page.limit + 1}`;
  const found = await rows(db, withAggregates(pageRows));
  const { items, pagination } = await finishPage(cursors, page, found.map(toSummary));
  return { items, pagination };
}

/** Cheap existence + visibility check for child routes. */
export async function requireAgent(db: Db, agentId: string, admin: boolean): Promise<{ id: string; status: AgentStatus; name: string; slug: string }> {
  const row = await first<{ id: string; status: AgentStatus; name: string; slug: string }>(
    db,
    sql`select id, status, name, slug from public.agents where id = ${agentId}`,
  );
  if (!row || (!admin && !isPublished(row.status))) throw notFound('Agent', { agentId });
  return row;
}

/**
 * The full agent in one round trip: the row with its aggregates, plus capabilities, steps and changelog as JSON
 * arrays in the order the API shows them. Works on a pool or inside a transaction (one statement).
 */
export async function getAgent(db: Db, by: { id: string } | { slug: string }, admin: boolean): Promise<Agent> {
  const where = 'id' in by ? sql`id = ${by.id}` : sql`slug = ${by.slug}`;
  const contentOf = (table: 'agent_capabilities' | 'agent_steps') => sql`(
    select coalesce(json_agg(json_build_object('id', c.id, 'agentId', c.agent_id, 'position', c.position, 'title', c.title,
             'description', c.description, 'createdAt', c.created_at, 'updatedAt', c.updated_at)
             order by c.position, c.created_at, c.id), '[]'::json)
    from ${sql.table(`public.${table}`)} c where c.agent_id = full_agent.id)`;
  const row = await first<AgentRow & { capabilities: unknown; steps: unknown; changelog: unknown }>(
    db,
    sql`select full_agent.*, ${contentOf('agent_capabilities')} as capabilities, ${contentOf('agent_steps')} as steps,
          (select coalesce(json_agg(json_build_object('id', e.id, 'agentId', e.agent_id, 'version', e.version, 'title', e.title,
                    'body', e.body, 'createdAt', e.created_at) order by e.created_at desc, e.id desc), '[]'::json)
           from public.agent_changelog_entries e where e.agent_id = full_agent.id) as changelog
        from (${withAggregates(sql`select * from public.agents where ${where}`)}) full_agent`,
  );
  if (!row || (!admin && !isPublished(row.status))) throw notFound('Agent', 'id' in by ? { agentId: by.id } : { slug: by.slug });
  const list = <T>(value: unknown): T[] => (typeof value === 'string' ? JSON.parse(value) : (value ?? [])) as T[];
  const content = (items: ContentItem[]) => items.map((i) => ({ ...i, createdAt: iso(i.createdAt), updatedAt: iso(i.updatedAt) }));
  return {
    ...toSummary(row),
    longDescription: row.longDescription,
    capabilities: content(list<ContentItem>(row.capabilities)),
    steps: content(list<ContentItem>(row.steps)),
    changelog: list<ChangelogEntry>(row.changelog).map((e) => ({ ...e, createdAt: iso(e.createdAt) })),
  };
}

export interface AgentFields {
  slug: string;
  name: string;
  description: string;
  longDescription?: string | null | undefined;
  status?: AgentStatus | undefined;
}

function slugConflict(err: unknown, slug: string | undefined): never {
  if (isUniqueViolation(err) && pgConstraint(err) === 'agents_slug_key') {
    throw conflict('An agent with this slug already exists', { slug });
  }
  throw err;
}

/** Inserts the agent row (inside the caller's transaction). */
export async function insertAgentRow(trx: Db, fields: AgentFields, now: Date): Promise<string> {
  try {
    const row = await first<{ id: string }>(
      trx,
      sql`insert into public.agents (slug, name, description, long_description, status, created_at, updated_at)
          values (${fields.slug}, ${fields.name}, ${fields.description}, ${fields.longDescription ?? null},
                  ${fields.status ?? 'draft'}, ${now}, ${now})
          returning id`,
    );
    return row!.id;
  } catch (err) {
    slugConflict(err, fields.slug);
  }
}

export interface AgentPatch {
  slug?: string | undefined;
  name?: string | undefined;
  description?: string | undefined;
  longDescription?: string | null | undefined;
  status?: AgentStatus | undefined;
  tags?: string[] | undefined;
  capabilities?: Array<{ title: string; description?: string | undefined }> | undefined;
  steps?: Array<{ title: string; description?: string | undefined }> | undefined;
}

/** Updates the given fields; capabilities, steps and tags replace their whole set when present. One transaction. */
export async function updateAgent(db: Db, agentId: string, patch: AgentPatch, now: Date): Promise<Agent> {
  return db.transaction().execute(async (trx) => {
    let row: { id: string } | undefined;
    try {
      row = await first<{ id: string }>(
        trx,
        sql`update public.agents set
              slug = coalesce(${patch.slug ?? null}, slug),
              name = coalesce(${patch.name ?? null}, name),
              description = coalesce(${patch.description ?? null}, description),
              long_description = case when ${patch.longDescription !== undefined} then ${patch.longDescription ?? null} else long_description end,
              status = coalesce(${patch.status ?? null}, status),
              updated_at = ${now}
            where id = ${agentId}
            returning id`,
      );
    } catch (err) {
      slugConflict(err, patch.slug);
    }
    if (!row) throw notFound('Agent', { agentId });
    if (patch.name) await renameAgentClient(trx, agentId, patch.name, now);
    if (patch.tags) await setAgentTags(trx, agentId, patch.tags, now);
    if (patch.capabilities) await replaceContent(trx, now, { kind: 'capabilities', agentId, items: patch.capabilities });
    if (patch.steps) await replaceContent(trx, now, { kind: 'steps', agentId, items: patch.steps });
    return getAgent(trx, { id: agentId }, true);
  });
}

/** Soft delete: the record stays (subscriptions, reviews and history keep pointing at it). Idempotent. */
export async function deactivateAgent(db: Db, agentId: string, now: Date): Promise<{ id: string }> {
  const row = await first<{ id: string }>(
    db,
    sql`update public.agents set status = 'inactive',
          updated_at = case when status = 'inactive' then updated_at else ${now} end
        where id = ${agentId} returning id`,
  );
  if (!row) throw notFound('Agent', { agentId });
  return row;
}
