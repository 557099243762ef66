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
 *
 * An agent's backend may write the review of its own agent with the user's token (contract.md, Trust boundaries), and
 * such a review says so (`writtenByAgent`); a review the user wrote themselves is changed or deleted only by them or an
 * admin (a hostile agent replaced users' 1-star reviews with 5-star ones, or deleted them: review 49). The author's id
 * is shown only to the author and admins: it is the id every agent the author uses knows them by, and the public list
 * told any of them which of its users reviewed which other agent (review 49).
 */

export type Review = z.infer<typeof reviewSchema>;

interface Row {
  id: string;
  agentId: string;
  userId: string | null;
  rating: number;
  title: string | null;
  body: string | null;
  writtenByAgent: boolean;
  createdAt: Date | string;
  updatedAt: Date | string;
}
/**
 * The columns of a review, the author's id only for `viewer` (and `all` for an admin, or the author writing with their
 * own credentials: an agent's token writing the user's review gets it without the id, as the list shows it; review 112).
 */
const columns = (viewer: { all: boolean; userId?: string | undefined }) => sql`id, agent_id as "agentId",
  case when ${viewer.all} or user_id = ${viewer.userId ?? null} then user_id end as "userId", rating, title, body,
  written_by_agent as "writtenByAgent", created_at as "createdAt", updated_at as "updatedAt"`;
const toReview = (r: Row): Review => ({ ...r, rating: Number(r.rating), createdAt: iso(r.createdAt), updatedAt: iso(r.updatedAt) });

export async function listReviews(
  db: Db,
  cursors: CursorSigner,
  agentId: string,
  query: { cursor?: string | undefined; limit?: number | undefined },
  /**
   * An admin sees a banned author's reviews too, to delete them by id, and every author's id; `userId`, the caller
   * with their own credentials (not an agent's token), sees their own review's.
   */
  viewer: { admin: boolean; userId?: string | undefined },
) {
  const page = await readPage(cursors, pageScope(`agents/${agentId}/reviews`), query);
  // `shown_from <= now()` is public.review_shown kept on the row (migration 20261127005600): no call per review.
  // `not author_banned_for_good` is implied by it, and stated so that the scan is of the partial index
  // reviews_listed_idx: the reviews of accounts banned for good (a review-bombing's thousands) are not read at all,
  // where asking review_shown about each before the first shown one took half a second (review 33).
  const shown = viewer.admin ? sql`true` : sql`not author_banned_for_good and shown_from <= now()`;
  const found = await rows<Row>(
    db,
    sql`select ${columns({ all: viewer.admin, userId: viewer.userId })} from public.reviews
        where agent_id = ${agentId} and ${shown} and ${afterCursor(page)}
        order by created_at desc, id desc limit ${page.limit + 1}`,
  );
  return finishPage(cursors, page, found.map(toReview));
}

export async function upsertReview(
  db: Db,
  input: { agentId: string; userId: string; rating: number; title?: string | undefined; body?: string | undefined },
  now: Date,
  /** Written with an agent's token: marked so, and never over a review the user wrote themselves. */
  byAgent: boolean,
): Promise<{ review: Review; created: boolean }> {
  // Written under a share lock of the author's row: a removal of the author (whose trigger deletes their reviews,
  // migration 20261127000200) waits for this write, or this write finds the author gone and writes nothing. Without it
  // a review sent while its author was being removed was written after the removal's delete and stayed, listed and
  // counted, for a user who no longer exists (found by a review; reviews.user_id has no foreign key to "user").
  // Whether the review there is the user's own is judged on the row the conflict locked, in the same statement.
  const row = await first<Row & { created: boolean }>(
    db,
    sql`with author as (${heldUser(input.userId)})
        insert into public.reviews as r (agent_id, user_id, rating, title, body, written_by_agent, created_at, updated_at)
        select ${input.agentId}, author.id, ${input.rating}, ${input.title || null}, ${input.body || null}, ${byAgent}, ${now}, ${now}
          from author
        on conflict (agent_id, user_id) do update
          set rating = excluded.rating, title = excluded.title, body = excluded.body,
              written_by_agent = excluded.written_by_agent, updated_at = excluded.updated_at
          where not excluded.written_by_agent or r.written_by_agent
        returning ${columns({ all: !byAgent })}, (xmax = 0) as created`,
  );
  if (!row) {
    if (byAgent && (await first(db, sql`select 1 from public.reviews where agent_id = ${input.agentId} and user_id = ${input.userId}`))) {
      throw usersOwnReview();
    }
    throw accountGone();
  }
  const { created, ...review } = row;
  return { review: toReview(review), created };
}

const notWrittenByAgent = () => forbidden("An agent's backend may delete only a review it wrote with the user's token");
const usersOwnReview = () => forbidden("The user wrote this review themselves: only they (or an admin) may change it, not an agent's backend");

/** The author deletes their own review (an agent's backend only one it wrote); an admin deletes any. */
export async function deleteReview(
  db: Db,
  agentId: string,
  reviewId: string,
  caller: { userId: string; admin: boolean; byAgent: boolean },
): Promise<{ id: string }> {
  const review = await first<{ userId: string; writtenByAgent: boolean }>(
    db,
    sql`select user_id as "userId", written_by_agent as "writtenByAgent" from public.reviews where id = ${reviewId} and agent_id = ${agentId}`,
  );
  if (!review) throw notFound('Review', { reviewId });
  // An agent's backend gets one refusal for every review it did not write, at the same point: a refusal that told the
  // user's own review from others' showed the agent which review its user wrote, which the list hides (review 52).
  const byAgentOnly = caller.byAgent && !caller.admin;
  if (byAgentOnly && (review.userId !== caller.userId || !review.writtenByAgent)) throw notWrittenByAgent();
  if (!caller.admin && review.userId !== caller.userId) throw forbidden('Only the author or an admin can delete this review');
  // The author's row first, as every writer of reviews takes it (the upsert's heldUser, the insert trigger, a ban, a
  // removal): the delete's trigger reads it `for share` to take the review off its tally, and taking it after the
  // review's row could deadlock with a ban of the author, which marks the author's reviews (migration 20261127004700).
  const refused = await db.transaction().execute(async (trx) => {
    await sql`select 1 from public."user" where id = ${review.userId} for share`.execute(trx);
    const deleted = await first(
      trx,
      sql`delete from public.reviews where id = ${reviewId} and (not ${byAgentOnly} or written_by_agent) returning id`,
    );
    // (gone meanwhile: deleted, as asked; still there: the user wrote it meanwhile, refused to an agent's backend)
    return !deleted && (await first(trx, sql`select 1 from public.reviews where id = ${reviewId}`)) !== undefined;
  });
  if (refused) throw notWrittenByAgent();
  return { id: reviewId };
}
