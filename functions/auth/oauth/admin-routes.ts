import { createRoute, z } from '@hono/zod-openapi';
import { requireAdmin } from '../../http/access.ts';
import { envelopeOf, ok } from '../../http/envelope.ts';
import { errors, jsonBody, jsonResponse, newRouter, uuidParam, SECURITY } from '../../http/router.ts';
import {
  getAgentClient,
  postLogoutRedirectUrisSchema,
  redirectUrisSchema,
  rotateAgentClientSecret,
  updateAgentClient,
} from '../agent-clients.ts';

/** Platform admins read an agent's OAuth client (never its secret), change its URIs, and rotate its secret. */

const agentClientSchema = z
  .object({
    clientId: z.string(),
    redirectUris: z.array(z.string()),
    postLogoutRedirectUris: z.array(z.string()),
    createdAt: z.string().openapi({ example: '2026-11-22T05:00:00.000Z' }),
  })
  .openapi('AgentOAuthClient');

const credentialsSchema = z
  .object({
    clientId: z.string(),
    clientSecret: z.string().openapi({ description: 'Shown once; only its hash is stored' }),
  })
  .openapi('AgentOAuthClientCredentials');

const params = z.object({ agentId: uuidParam('agentId') });
const security = SECURITY.sessionOrBearer;

const getAgentClientRoute = createRoute({
  operationId: 'getAgentClient',
  method: 'get',
  path: '/admin/agents/{agentId}/oauth-client',
  tags: ['OAuth clients'],
  summary: "The agent's OAuth client (without its secret)",
  security,
  request: { params },
  responses: { 200: jsonResponse(envelopeOf(agentClientSchema), 'The client'), ...errors(400, 401, 403, 404) },
});

const updateAgentClientRoute = createRoute({
  operationId: 'updateAgentClient',
  method: 'patch',
  path: '/admin/agents/{agentId}/oauth-client',
  tags: ['OAuth clients'],
  summary: "Replace the agent client's redirect URIs and/or post-logout redirect URIs",
  security,
  request: {
    params,
    body: jsonBody(
      z.object({
        redirectUris: redirectUrisSchema.optional(),
        postLogoutRedirectUris: postLogoutRedirectUrisSchema.optional(),
      }),
    ),
  },
  responses: { 200: jsonResponse(envelopeOf(agentClientSchema), 'The updated client'), ...errors(400, 401, 403, 404) },
});

const rotateSecretRoute = createRoute({
  operationId: 'rotateAgentClientSecret',
  method: 'post',
  path: '/admin/agents/{agentId}/oauth-client/rotate-secret',
  tags: ['OAuth clients'],
  summary: 'Issue a new client secret (shown once); the old one stops working at once',
  security,
  request: { params },
  responses: { 200: jsonResponse(envelopeOf(credentialsSchema), 'The new credentials'), ...errors(400, 401, 403, 404) },
});

export function agentClientAdminRoutes() {
  const router = newRouter();

  router.openapi(getAgentClientRoute, async (c) => {
    await requireAdmin(c);
    const { agentId } = c.req.valid('param');
    return c.json(ok(await getAgentClient(c.var.deps.database.db, agentId)), 200);
  });

  router.openapi(updateAgentClientRoute, async (c) => {
    await requireAdmin(c);
    const { agentId } = c.req.valid('param');
    const patch = c.req.valid('json');
    const { database, clock } = c.var.deps;
    const client = await database.db.transaction().execute((trx) => updateAgentClient({ clock }, trx, agentId, patch));
    return c.json(ok(client), 200);
  });

  router.openapi(rotateSecretRoute, async (c) => {
    await requireAdmin(c);
    const { agentId } = c.req.valid('param');
    const { database, clock } = c.var.deps;
    return c.json(ok(await rotateAgentClientSecret({ clock }, database.db, agentId)), 200);
  });

  return router;
}
