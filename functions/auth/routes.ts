import { createRoute, z } from '@hono/zod-openapi';
import { requireAdmin, requireUser, seesEmail } from '../http/access.ts';
import { envelopeOf, ok } from '../http/envelope.ts';
import { errors, jsonBody, jsonResponse, newRouter, SECURITY } from '../http/router.ts';
import { accountPages } from './account-pages.ts';
import { banUser, unbanUser, type OnUserBanned } from './ban-user.ts';
import { ROLES } from './better-auth.ts';
import { setUserRole } from './set-user-role.ts';
import { bannedUserSchema, getUser, userSchema } from './users.ts';

/** GET /me, the admin user controls (ban, unban, set role) and the built-in account pages. */

const security = SECURITY.sessionOrBearer;
/**
 * GET /me for an agent's bearer token (contract.md, Trust boundaries: the user's id, email and name only), and of those
 * only what the user consented to, as the OpenID userinfo answers: `email` with the `email` scope, `name` with
 * `profile`. The user may accept fewer scopes than the agent asked for; /me gave the email and name all the same
 * (found by a review).
 */
const agentViewOfUserSchema = z
  .object({
    id: z.string(),
    email: z.string().optional().openapi({ description: 'Only when the token carries the `email` scope' }),
    name: z.string().optional().openapi({ description: 'Only when the token carries the `profile` scope' }),
  })
  .openapi('UserAsSeenByAgent');

const userIdParam = z
  .string()
  .min(1)
  .max(255)
  .openapi({ param: { name: 'userId', in: 'path' }, example: '5b7e0c1c-3f4e-4a43-9d8f-2a1b9f0c6d11' });

const getMe = createRoute({
  operationId: 'getMe',
  method: 'get',
  path: '/me',
  tags: ['Identity'],
  summary: 'The signed-in user (for front-end admin gating)',
  security,
  description:
    "With a cookie session (or the marketplace's first-party token): the whole record. With an agent's bearer token: " +
    '`{ id, email, name }` only: an agent learns nothing of the user\'s role or account state; `email` only with the ' +
    '`email` scope and `name` only with `profile`, as the OpenID userinfo endpoint answers.',
  responses: {
    200: jsonResponse(envelopeOf(z.union([userSchema, agentViewOfUserSchema])), 'The current user'),
    ...errors(401, 'cookieRead'),
  },
});

const banUserRoute = createRoute({
  operationId: 'banUser',
  method: 'post',
  path: '/admin/users/{userId}/ban',
  tags: ['Administration'],
  summary: 'Ban a user: sessions and OAuth tokens revoked at once; optionally cancel subscriptions at period end',
  security,
  request: {
    params: z.object({ userId: userIdParam }),
    body: {
      required: false,
      content: {
        'application/json': {
          schema: z
            .object({
              reason: z.string().max(500).optional(),
              cancelSubscriptions: z.boolean().optional(),
            })
            .strict(),
        },
      },
    },
  },
  // 422: the last usable admin is never banned (two admins banning each other at once: the later one).
  responses: { 200: jsonResponse(envelopeOf(bannedUserSchema), 'The banned user'), ...errors(400, 401, 403, 404, 422) },
});

const unbanUserRoute = createRoute({
  operationId: 'unbanUser',
  method: 'post',
  path: '/admin/users/{userId}/unban',
  tags: ['Administration'],
  summary: 'Lift a ban (tokens issued before the ban stay revoked)',
  security,
  request: { params: z.object({ userId: userIdParam }) },
  responses: { 200: jsonResponse(envelopeOf(bannedUserSchema), 'The user'), ...errors(401, 403, 404) },
});

const setUserRoleRoute = createRoute({
  operationId: 'setUserRole',
  method: 'put',
  path: '/admin/users/{userId}/role',
  tags: ['Administration'],
  summary: 'Set a user role; demoting your own account is refused (403), and so is demoting the last admin (422)',
  security,
  request: {
    params: z.object({ userId: userIdParam }),
    body: jsonBody(z.object({ role: z.enum(ROLES) }).strict()),
  },
  responses: { 200: jsonResponse(envelopeOf(bannedUserSchema), 'The user with the new role'), ...errors(400, 401, 403, 404, 422) },
});

/** `onUserBanned`: the other domains' part of a ban (app.ts passes billing's). */
export function identityRoutes(options: { onUserBanned: OnUserBanned }) {
  const router = newRouter();

  router.openapi(getMe, async (c) => {
    const principal = await requireUser(c);
    if (principal.agentId) {
      const { userId: id, email, name, scopes = [] } = principal;
      return c.json(ok({ id, ...(seesEmail(principal) ? { email } : {}), ...(scopes.includes('profile') ? { name } : {}) }), 200);
    }
    // The authenticator read the user row already (banned users never get this far).
    if (principal.createdAt) {
      const { userId: id, email, name, role, createdAt } = principal;
      return c.json(ok({ id, email, name, role, banned: false, createdAt: createdAt.toISOString() }), 200);
    }
    const { banReason: _, ...me } = await getUser(c.var.deps.database.db, principal.userId);
    return c.json(ok(me), 200);
  });

  router.openapi(banUserRoute, async (c) => {
    const admin = await requireAdmin(c);
    const { userId } = c.req.valid('param');
    // The body is optional ("action endpoints accept a POST with no body"); zod validated it when present.
    const body = c.req.header('content-type') ? c.req.valid('json') : {};
    const user = await banUser(c.var.deps, { actorId: admin.userId, userId, ...(body ?? {}) }, options.onUserBanned);
    return c.json(ok(user), 200);
  });

  router.openapi(unbanUserRoute, async (c) => {
    const admin = await requireAdmin(c);
    const { userId } = c.req.valid('param');
    return c.json(ok(await unbanUser(c.var.deps, { actorId: admin.userId, userId })), 200);
  });

  router.openapi(setUserRoleRoute, async (c) => {
    const admin = await requireAdmin(c);
    const { userId } = c.req.valid('param');
    const { role } = c.req.valid('json');
    return c.json(ok(await setUserRole(c.var.deps, { actorId: admin.userId, userId, role })), 200);
  });

  // The pages the reset and invitation mails link to when there is no FRONTEND_URL (outside the OpenAPI document).
  router.route('/', accountPages());

  return router;
}
