import type { z } from '@hono/zod-openapi';
import { forbidden, notFound } from '../http/errors.ts';
import { afterCursor, finishPage, pageScope, readPage, type CursorSigner } from '../http/pagination.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { reviewSchema } from './schemas.ts';
import { iso } from './schemas.ts';
import { accountGone, heldUser } from './held-user.ts';

/**
 * Reviews: one per (user, agent). Writing again replaces the rating and text of the same row (the upsert
 * targets the unique pair, so parallel writes of one user still leave exactly one row); `createdAt` keeps the
 * first write, so the newest-first list and its cursors stay stable while authors edit. A banned author's reviews are
 * neither listed (but to admins, who may delete them) nor counted while the ban lasts (public.review_shown, by the
 * review's id: migrations 20261126002300 and 20261126002900). The counting is the database's: triggers keep each
 * agent's tallies as reviews and bans change (migration 20261127004700), and agents.ts reads them.
 */

export type Review = z.infer<typeof reviewSchema>;

interface Row {
  id: string;
  agentId: string;
  userId: string;
  rating: number;
  title: string | null;
  body: string | null;
  createdAt: Date | string;
  updatedAt: Date | string;
}
const columns = sql`id, agent_id as "agentId", user_id as "userId", rating, title, body,
  created_at as "createdAt", updated_at as "updatedAt"`;
const toReview = (r: Row): Review => ({ ...r, rating: Number(r.rating), createdAt: iso(r.createdAt), updatedAt: iso(r.updatedAt) });

export async function listReviews(
  db: Db,
  cursors: CursorSigner,
  agentId: string,
  query: { cursor?: string | undefined; limit?: number | undefined },
  /** An admin sees a banned author's reviews too, to delete them by id. */
  viewer: { admin: boolean },
) {
  const page = await readPage(cursors, pageScope(`agents/${agentId}/reviews`), query);
  // `not author_banned_for_good` is implied by review_shown, and stated so that the scan is of the partial index
  // reviews_listed_idx: the reviews of accounts banned for good (a review-bombing's thousands) are not read at all,
  // where asking review_shown about each before the first shown one took half a second (review 33).
  const shown = viewer.admin ? sql`true` : sql`not author_banned_for_good and public.review_shown(id)`;
  const found = await rows<Row>(
    db,
    sql`select ${columns} from public.reviews
        where agent_id = ${agentId} and ${shown} and ${afterCursor(page)}
        order by created_at desc, id desc limit ${page.limit + 1}`,
  );
  return finishPage(cursors, page, found.map(toReview));
}

export async function upsertReview(
  db: Db,
  input: { agentId: string; userId: string; rating: number; title?: string | undefined; body?: string | undefined },
  now: Date,
): Promise<{ review: Review; created: boolean }> {
  // Written under a share lock of the author's row: a removal of the author (whose trigger deletes their reviews,
  // migration 20261127000200) waits for this write, or this write finds the author gone and writes nothing. Without it
  // a review sent while its author was being removed was written after the removal's delete and stayed, listed and
  // counted, for a user who no longer exists (found by a review; reviews.user_id has no foreign key to "user").
  const row = await first<Row & { created: boolean }>(
    db,
    sql`with author as (${heldUser(input.userId)})
        insert into public.reviews as r (agent_id, user_id, rating, title, body, created_at, updated_at)
        select ${input.agentId}, author.id, ${input.rating}, ${input.title || null}, ${input.body || null}, ${now}, ${now} from author
        on conflict (agent_id, user_id) do update
          set rating = excluded.rating, title = excluded.title, body = excluded.body, updated_at = excluded.updated_at
        returning ${columns}, (xmax = 0) as created`,
  );
  if (!row) throw accountGone();
  const { created, ...review } = row;
  return { review: toReview(review), created };
}

/** The author deletes their own review; an admin deletes any. */
export async function deleteReview(
  db: Db,
  agentId: string,
  reviewId: string,
  caller: { userId: string; admin: boolean },
): Promise<{ id: string }> {
  const review = await first<{ userId: string }>(
    db,
    sql`select user_id as "userId" from public.reviews where id = ${reviewId} and agent_id = ${agentId}`,
  );
  if (!review) throw notFound('Review', { reviewId });
  if (!caller.admin && review.userId !== caller.userId) throw forbidden('Only the author or an admin can delete this review');
  // The author's row first, as every writer of reviews takes it (the upsert's heldUser, the insert trigger, a ban, a
  // removal): the delete's trigger reads it `for share` to take the review off its tally, and taking it after the
  // review's row could deadlock with a ban of the author, which marks the author's reviews (migration 20261127004700).
  await db.transaction().execute(async (trx) => {
    await sql`select 1 from public."user" where id = ${review.userId} for share`.execute(trx);
    await sql`delete from public.reviews where id = ${reviewId}`.execute(trx);
  });
  return { id: reviewId };
}
