import { createRoute, z } from '@hono/zod-openapi';
import { requireAdmin, requireUser } from '../../http/access.ts';
import { viewerIsAdmin } from './viewer.ts';
import { envelopeOf, ok, okPage, pageEnvelopeOf } from '../../http/envelope.ts';
import { pageQuerySchema } from '../../http/pagination.ts';
import { errors, jsonBody, jsonResponse, newRouter, uuidParam, SECURITY } from '../../http/router.ts';
import { deactivateAgent, getAgent, listAgents, requireAgent, updateAgent } from '../agents.ts';
import { createAgent } from '../create-agent.ts';
import { installAgent } from '../install-agent.ts';
import {
  agentSchema,
  agentSummarySchema,
  createAgentBody,
  createdAgentSchema,
  listAgentsQuery,
  updateAgentBody,
} from '../schemas.ts';

/** Agents: create (with the OAuth client), list, read by id or slug, update, soft delete, install. */

export const security = SECURITY.sessionOrBearer;
const tags = ['Catalog'];
const agentIdParams = z.object({ agentId: uuidParam('agentId') });
const idSchema = z.object({ id: z.uuid() });

const createAgentRoute = createRoute({
  operationId: 'createAgent',
  method: 'post',
  path: '/agents',
  tags,
  summary: 'Create an agent and provision its OAuth client (the client secret is returned once)',
  security,
  request: { body: jsonBody(createAgentBody) },
  responses: { 201: jsonResponse(envelopeOf(createdAgentSchema), 'The created agent'), ...errors(400, 401, 403, 409) },
});

const listAgentsRoute = createRoute({
  operationId: 'listAgents',
  method: 'get',
  path: '/agents',
  tags,
  summary: 'List agents (slim form), newest first. Draft and inactive agents are listed for admins only',
  request: { query: pageQuerySchema.extend(listAgentsQuery.shape) },
  responses: { 200: jsonResponse(pageEnvelopeOf(agentSummarySchema), 'A page of agents'), ...errors(400) },
});

const getAgentRoute = createRoute({
  operationId: 'getAgent',
  method: 'get',
  path: '/agents/{agentId}',
  tags,
  summary: 'An agent in full (with capabilities, steps and changelog)',
  request: { params: agentIdParams },
  responses: { 200: jsonResponse(envelopeOf(agentSchema), 'The agent'), ...errors(400, 404, 'agentPath') },
});

const getAgentBySlugRoute = createRoute({
  operationId: 'getAgentBySlug',
  method: 'get',
  path: '/agents/by-slug/{slug}',
  tags,
  summary: 'An agent in full, by slug',
  request: {
    params: z.object({ slug: z.string().min(1).max(80).openapi({ param: { name: 'slug', in: 'path' }, example: 'support-copilot' }) }),
  },
  responses: { 200: jsonResponse(envelopeOf(agentSchema), 'The agent'), ...errors(404, 'agentPath') },
});

const updateAgentRoute = createRoute({
  operationId: 'updateAgent',
  method: 'patch',
  path: '/agents/{agentId}',
  tags,
  summary: 'Update an agent; capabilities, steps and tags replace the whole set when present',
  security,
  request: { params: agentIdParams, body: jsonBody(updateAgentBody) },
  responses: { 200: jsonResponse(envelopeOf(agentSchema), 'The updated agent'), ...errors(400, 401, 403, 404, 409) },
});

const deleteAgentRoute = createRoute({
  operationId: 'deleteAgent',
  method: 'delete',
  path: '/agents/{agentId}',
  tags,
  summary: 'Soft-delete an agent (status inactive; the record and its history stay)',
  security,
  request: { params: agentIdParams },
  responses: { 200: jsonResponse(envelopeOf(idSchema), 'The agent id'), ...errors(400, 401, 403, 404) },
});

const installAgentRoute = createRoute({
  operationId: 'installAgent',
  method: 'post',
  path: '/agents/{agentId}/install',
  tags,
  summary: 'Install an active agent; idempotent per user (counted once)',
  security,
  request: { params: agentIdParams },
  responses: {
    200: jsonResponse(envelopeOf(z.object({ installs: z.int() })), 'The agent’s install count'),
    ...errors(400, 401, 404, 422, 'agentPath', 'cookieWrite'),
  },
});

export function agentRoutes() {
  const router = newRouter();

  router.openapi(createAgentRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    const agent = await createAgent(deps, deps.database.db, c.req.valid('json'));
    return c.json(ok(agent), 201);
  });

  router.openapi(listAgentsRoute, async (c) => {
    // Public: anyone may browse the published catalog; admins also see draft and inactive agents.
    const { deps } = c.var;
    const { items, pagination } = await listAgents(deps.database.db, deps.cursors, {
      query: c.req.valid('query'),
      admin: await viewerIsAdmin(c),
    });
    return c.json(okPage(items, pagination), 200);
  });

  router.openapi(getAgentRoute, async (c) => {
    // Public: published agents are readable by anyone (404 for unpublished ones unless admin).
    const { agentId } = c.req.valid('param');
    return c.json(ok(await getAgent(c.var.deps.database.db, { id: agentId }, await viewerIsAdmin(c))), 200);
  });

  router.openapi(getAgentBySlugRoute, async (c) => {
    // Public, as getAgent.
    const { slug } = c.req.valid('param');
    return c.json(ok(await getAgent(c.var.deps.database.db, { slug }, await viewerIsAdmin(c))), 200);
  });

  router.openapi(updateAgentRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    const { agentId } = c.req.valid('param');
    return c.json(ok(await updateAgent(deps.database.db, agentId, c.req.valid('json'), deps.clock.now())), 200);
  });

  router.openapi(deleteAgentRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    const { agentId } = c.req.valid('param');
    return c.json(ok(await deactivateAgent(deps.database.db, agentId, deps.clock.now())), 200);
  });

  router.openapi(installAgentRoute, async (c) => {
    const user = await requireUser(c);
    const { deps } = c.var;
    const { agentId } = c.req.valid('param');
    const agent = await requireAgent(deps.database.db, agentId, user.role === 'platform_admin');
    const { installs } = await installAgent(deps.database.db, agent, user.userId, deps.clock.now());
    return c.json(ok({ installs }), 200);
  });

  return router;
}
