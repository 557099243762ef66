import type { z } from '@hono/zod-openapi';
import { ApiError, conflict, notFound } from '../http/errors.ts';
import { afterCursor, finishPage, pageScope, readPage, type CursorSigner } from '../http/pagination.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { tagSchema } from './schemas.ts';
import { iso } from './schemas.ts';

/**
 * Tags group agents in the catalog. A tag has a display name and a slug (the list filter `?tag=` uses the slug).
 * Agents are tagged through agent create/update with names or slugs; unknown ones are created on the way.
 */

export type Tag = z.infer<typeof tagSchema>;

/** "Customer Support!" -> "customer-support". */
export function slugify(name: string): string {
  return name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 60)
    .replace(/-+$/g, '');
}

interface Row {
  id: string;
  slug: string;
  name: string;
  createdAt: Date | string;
}
const toTag = (r: Row): Tag => ({ ...r, createdAt: iso(r.createdAt) });

/**
 * Tags, newest first. Admins see every tag; everyone else the tags of published agents and those an admin made on
 * their own (createTag): a tag that createAgent or updateAgent made, carried by unpublished agents only or by none
 * (a draft re-tagged before launch, review 91), was named for an agent nobody may see yet ("Project Nightingale"),
 * so listing it would announce the draft. public.tag_is_listed is the rule, for the Data API's policy too.
 */
export async function listTags(
  db: Db,
  cursors: CursorSigner,
  query: { cursor?: string | undefined; limit?: number | undefined },
  viewer: { admin: boolean },
) {
  const page = await readPage(cursors, pageScope('tags', { all: viewer.admin || undefined }), query);
  const visible = viewer.admin ? sql`true` : sql`public.tag_is_listed(t.id, t.standalone)`;
  const found = await rows<Row>(
    db,
    sql`select t.id, t.slug, t.name, t.created_at as "createdAt" from public.tags t
        where ${visible} and ${afterCursor(page, 't')} order by t.created_at desc, t.id desc limit ${page.limit + 1}`,
  );
  return finishPage(cursors, page, found.map(toTag));
}

export async function createTag(db: Db, input: { name: string; slug?: string | undefined }, now: Date): Promise<Tag> {
  const slug = input.slug ?? slugify(input.name);
  if (!slug) {
    throw new ApiError('VALIDATION_ERROR', 'The tag name needs at least one letter or digit', {
      issues: [{ path: 'name', message: 'needs at least one letter or digit' }],
    });
  }
  // A tag createAgent or updateAgent made (not listed while no published agent carries it) becomes one the admin made on
  // its own, keeping its name and id: refused as existing, it could never be listed again short of deleting it from
  // every agent (review 96). Only a tag the admin already made on its own is a conflict.
  const row = await first<Row>(
    db,
    sql`insert into public.tags (slug, name, created_at, standalone) values (${slug}, ${input.name}, ${now}, true)
        on conflict (slug) do update set standalone = true where not tags.standalone
        returning id, slug, name, created_at as "createdAt"`,
  );
  if (!row) throw conflict('A tag with this slug already exists', { slug });
  return toTag(row);
}

/**
 * Deletes the tag and untags its agents (the agents themselves are untouched).
 *
 * Lock order: agent rows, then tag rows, then agent_tags rows, as updateAgent takes them (its UPDATE locks the agent
 * row, then setAgentTags takes the tags it links before touching the agent's agent_tags rows). Deleting the tag
 * alone locked the tag first and then, by the cascade, the agent_tags rows an agent's re-tagging held while it waited
 * for that tag: a deadlock, answered 503 concurrent_change (found by a review). So the agents carrying the tag are
 * locked first, ordered by id (two deletions sharing agents lock them in the same order), with the lock the agent's
 * UPDATE takes (`for no key update`: rows that only reference the agent, installs or reviews, are not held up).
 */
export async function deleteTag(db: Db, tagId: string): Promise<{ id: string }> {
  return db.transaction().execute(async (trx) => {
    await sql`select a.id from public.agents a
              where a.id in (select at.agent_id from public.agent_tags at where at.tag_id = ${tagId})
              order by a.id for no key update of a`.execute(trx);
    const row = await first<{ id: string }>(trx, sql`delete from public.tags where id = ${tagId} returning id`);
    if (!row) throw notFound('Tag', { tagId });
    return row;
  });
}

/** Replaces an agent's tags (inside the caller's transaction), creating missing tags by slug. */
export async function setAgentTags(trx: Db, agentId: string, names: string[], now: Date): Promise<void> {
  const wanted = new Map<string, string>();
  for (const name of names) {
    const slug = slugify(name);
    if (!slug) {
      throw new ApiError('VALIDATION_ERROR', 'A tag needs at least one letter or digit', {
        issues: [{ path: 'tags', message: `"${name}" has no letter or digit` }],
      });
    }
    if (!wanted.has(slug)) wanted.set(slug, name);
  }
  if (wanted.size === 0) {
    await sql`delete from public.agent_tags where agent_id = ${agentId}`.execute(trx);
    return;
  }
  const payload = JSON.stringify([...wanted].map(([slug, name]) => ({ slug, name })));
  // Lock order (see deleteTag): the caller holds the agent row; the tags come next, the agent_tags rows last. So the
  // tags are made and taken (`for key share`, what the link's foreign key check would take) before the agent's old
  // links are deleted: a re-tagging that waits for a tag being deleted holds none of the links that deletion removes.
  // Insert-if-missing keeps an existing tag's display name (`on conflict do nothing`).
  // A tag deleted (committed) between the two statements is skipped by the lock: make it again, a few times at most.
  let tagIds: string[] = [];
  for (let attempt = 0; tagIds.length < wanted.size && attempt < 3; attempt++) {
    await sql`insert into public.tags (slug, name, created_at)
              select t ->> 'slug', t ->> 'name', ${now} from jsonb_array_elements(${payload}::text::jsonb) t
              on conflict (slug) do nothing`.execute(trx);
    tagIds = (
      await rows<{ id: string }>(
        trx,
        sql`select tg.id from public.tags tg
            where tg.slug in (select t ->> 'slug' from jsonb_array_elements(${payload}::text::jsonb) t)
            order by tg.id for key share`,
      )
    ).map((r) => r.id);
  }
  await sql`delete from public.agent_tags where agent_id = ${agentId}`.execute(trx);
  await sql`insert into public.agent_tags (agent_id, tag_id)
            select ${agentId}, id from unnest(${tagIds}::uuid[]) as id
            on conflict do nothing`.execute(trx);
}
