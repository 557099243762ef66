import { createRoute, z } from '@hono/zod-openapi';
import { requireAdmin, requireUser } from '../../http/access.ts';
import { viewer, viewerIsAdmin } from './viewer.ts';
import { envelopeOf, ok, okPage, pageEnvelopeOf } from '../../http/envelope.ts';
import { pageQuerySchema } from '../../http/pagination.ts';
import { enforceRateLimit } from '../../http/rate-limit.ts';
import { errors, jsonBody, jsonResponse, newRouter, uuidParam } from '../../http/router.ts';
import { requireAgent } from '../agents.ts';
import { deleteReview, listReviews, upsertReview } from '../reviews.ts';
import { createTagBody, reviewSchema, tagSchema, upsertReviewBody } from '../schemas.ts';
import { createTag, deleteTag, listTags } from '../tags.ts';
import { security } from './agents.ts';

/** Tags and reviews. */

const agentIdParams = z.object({ agentId: uuidParam('agentId') });
const idSchema = z.object({ id: z.uuid() });

const listTagsRoute = createRoute({
  operationId: 'listTags',
  method: 'get',
  path: '/tags',
  tags: ['Tags'],
  summary: 'Tags, newest first (paginated)',
  request: { query: pageQuerySchema },
  responses: { 200: jsonResponse(pageEnvelopeOf(tagSchema), 'A page of tags'), ...errors(400) },
});

const createTagRoute = createRoute({
  operationId: 'createTag',
  method: 'post',
  path: '/tags',
  tags: ['Tags'],
  summary: 'Create a tag (slug derived from the name unless given)',
  security,
  request: { body: jsonBody(createTagBody) },
  responses: { 201: jsonResponse(envelopeOf(tagSchema), 'The tag'), ...errors(400, 401, 403, 409) },
});

const deleteTagRoute = createRoute({
  operationId: 'deleteTag',
  method: 'delete',
  path: '/tags/{tagId}',
  tags: ['Tags'],
  summary: 'Delete a tag (its agents are untagged, not changed otherwise)',
  security,
  request: { params: z.object({ tagId: uuidParam('tagId') }) },
  responses: { 200: jsonResponse(envelopeOf(idSchema), 'The deleted id'), ...errors(400, 401, 403, 404) },
});

const listReviewsRoute = createRoute({
  operationId: 'listReviews',
  method: 'get',
  path: '/agents/{agentId}/reviews',
  tags: ['Reviews'],
  summary: 'Reviews of an agent, newest first (paginated)',
  request: { params: agentIdParams, query: pageQuerySchema },
  responses: { 200: jsonResponse(pageEnvelopeOf(reviewSchema), 'A page of reviews'), ...errors(400, 404, 'agentPath') },
});

const upsertReviewRoute = createRoute({
  operationId: 'upsertMyReview',
  method: 'put',
  path: '/agents/{agentId}/reviews',
  tags: ['Reviews'],
  summary:
    "Write or replace your review of an agent (one per user and agent); 201 when new, 200 when replaced. With an agent's token: marked writtenByAgent, and 403 over a review the user wrote themselves",
  security,
  request: { params: agentIdParams, body: jsonBody(upsertReviewBody) },
  responses: {
    200: jsonResponse(envelopeOf(reviewSchema), 'Your review, replaced'),
    201: jsonResponse(envelopeOf(reviewSchema), 'Your review, created'),
    ...errors(400, 401, 403, 404, 429, 'agentPath', 'cookieWrite'),
  },
});

const deleteReviewRoute = createRoute({
  operationId: 'deleteReview',
  method: 'delete',
  path: '/agents/{agentId}/reviews/{reviewId}',
  tags: ['Reviews'],
  summary: "Delete a review (its author or an admin; with an agent's token, only a review an agent's backend wrote)",
  security,
  request: { params: z.object({ agentId: uuidParam('agentId'), reviewId: uuidParam('reviewId') }) },
  responses: { 200: jsonResponse(envelopeOf(idSchema), 'The deleted id'), ...errors(400, 401, 403, 404) },
});

export function communityRoutes() {
  const router = newRouter();

  router.openapi(listTagsRoute, async (c) => {
    // Public: tags are catalog navigation (an admin also sees the tags only unpublished agents carry).
    const { deps } = c.var;
    const { items, pagination } = await listTags(deps.database.db, deps.cursors, c.req.valid('query'), { admin: await viewerIsAdmin(c) });
    return c.json(okPage(items, pagination), 200);
  });
  router.openapi(createTagRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    return c.json(ok(await createTag(deps.database.db, c.req.valid('json'), deps.clock.now())), 201);
  });
  router.openapi(deleteTagRoute, async (c) => {
    await requireAdmin(c);
    return c.json(ok(await deleteTag(c.var.deps.database.db, c.req.valid('param').tagId)), 200);
  });

  router.openapi(listReviewsRoute, async (c) => {
    // Public: reviews of published agents are readable by anyone.
    const { deps } = c.var;
    const { agentId } = c.req.valid('param');
    const who = await viewer(c);
    const admin = who?.role === 'platform_admin';
    await requireAgent(deps.database.db, agentId, admin);
    // The caller's own review shows its author's id, with the caller's own credentials (not an agent's token: review 49)
    const userId = who && !who.agentId ? who.userId : undefined;
    const { items, pagination } = await listReviews(deps.database.db, deps.cursors, agentId, c.req.valid('query'), { admin, userId });
    return c.json(okPage(items, pagination), 200);
  });
  router.openapi(upsertReviewRoute, async (c) => {
    const user = await requireUser(c);
    const { deps } = c.var;
    // Rate limited per client address like the other public writes: any account, verified or not, may write one
    // review per agent, and a flood of new accounts' reviews from one address is what review-bombing is (review 33).
    await enforceRateLimit(c, 'review', deps.config.authRateLimitPerMinute);
    const { agentId } = c.req.valid('param');
    await requireAgent(deps.database.db, agentId, user.role === 'platform_admin');
    const { review, created } = await upsertReview(
      deps.database.db,
      { agentId, userId: user.userId, ...c.req.valid('json') },
      deps.clock.now(),
      Boolean(user.agentId),
    );
    return created ? c.json(ok(review), 201) : c.json(ok(review), 200);
  });
  router.openapi(deleteReviewRoute, async (c) => {
    const user = await requireUser(c);
    const { agentId, reviewId } = c.req.valid('param');
    const deleted = await deleteReview(c.var.deps.database.db, agentId, reviewId, {
      userId: user.userId,
      admin: user.role === 'platform_admin',
      byAgent: Boolean(user.agentId),
    });
    return c.json(ok(deleted), 200);
  });

  return router;
}
