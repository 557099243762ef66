import { createRoute, z } from '@hono/zod-openapi';
import { requireAdmin } from '../http/access.ts';
import { envelopeOf, ok, okPage, pageEnvelopeOf } from '../http/envelope.ts';
import { adminPageQuery } from '../http/pagination.ts';
import { errors, jsonBody, jsonResponse, newRouter, uuidParam, SECURITY } from '../http/router.ts';
import { listDeliveries, redeliver } from './deliveries.ts';
import { createWebhook, deleteWebhook, listWebhooks, rotateWebhookSecret, updateWebhook } from './endpoints.ts';
import {
  createWebhookSchema,
  deliverySchema,
  listDeliveriesQuerySchema,
  updateWebhookSchema,
  webhookSchema,
  webhookWithSecretSchema,
} from './schemas.ts';

/** Agent webhooks (contract.md revision 2): platform admins manage an agent's endpoints and see their deliveries. */

const tags = ['Agent webhooks'];
const security = SECURITY.sessionOrBearer;
const agentParams = z.object({ agentId: uuidParam('agentId') });
const webhookParams = z.object({ agentId: uuidParam('agentId'), webhookId: uuidParam('webhookId') });
const idSchema = z.object({ id: z.uuid() });

const listRoute = createRoute({
  operationId: 'listAgentWebhooks',
  method: 'get',
  path: '/admin/agents/{agentId}/webhooks',
  tags,
  summary: "An agent's webhook endpoints, newest first (secrets are never shown again)",
  security,
  request: { params: agentParams },
  responses: { 200: jsonResponse(envelopeOf(z.array(webhookSchema)), 'The endpoints'), ...errors(400, 401, 403, 404) },
});

const createRouteDef = createRoute({
  operationId: 'createAgentWebhook',
  method: 'post',
  path: '/admin/agents/{agentId}/webhooks',
  tags,
  summary: 'Add an endpoint; the answer carries its signing secret, shown this once',
  description:
    'url: https, or plain http on a loopback host (localhost, 127.0.0.0/8, [::1]); no credentials in it. events: the event ' +
    'types to send (subscription.created, subscription.updated, subscription.canceled, usage.threshold_reached, ' +
    'reservation.expired). Only events that happen after the endpoint exists are sent to it.',
  security,
  request: { params: agentParams, body: jsonBody(createWebhookSchema) },
  responses: {
    201: jsonResponse(envelopeOf(webhookWithSecretSchema), 'The endpoint with its secret'),
    ...errors(400, 401, 403, 404),
  },
});

const updateRouteDef = createRoute({
  operationId: 'updateAgentWebhook',
  method: 'patch',
  path: '/admin/agents/{agentId}/webhooks/{webhookId}',
  tags,
  summary: "Change an endpoint's url, event types, or enabled flag",
  description:
    'A disabled endpoint gets no new deliveries; its pending ones wait and go out, in order, once it is enabled again.',
  security,
  request: { params: webhookParams, body: jsonBody(updateWebhookSchema) },
  responses: { 200: jsonResponse(envelopeOf(webhookSchema), 'The endpoint'), ...errors(400, 401, 403, 404) },
});

const deleteRouteDef = createRoute({
  operationId: 'deleteAgentWebhook',
  method: 'delete',
  path: '/admin/agents/{agentId}/webhooks/{webhookId}',
  tags,
  summary: 'Remove an endpoint with its deliveries (pending ones are not sent)',
  security,
  request: { params: webhookParams },
  responses: { 200: jsonResponse(envelopeOf(idSchema), 'The removed id'), ...errors(400, 401, 403, 404) },
});

const rotateRouteDef = createRoute({
  operationId: 'rotateAgentWebhookSecret',
  method: 'post',
  path: '/admin/agents/{agentId}/webhooks/{webhookId}/rotate-secret',
  tags,
  summary: 'Replace the signing secret; the new one is shown this once',
  description:
    'For 24 hours after a rotation every message carries two signatures (`v1,<new> v1,<old>`), so the agent backend can ' +
    'switch to the new secret without missing a message.',
  security,
  request: { params: webhookParams },
  responses: { 200: jsonResponse(envelopeOf(webhookWithSecretSchema), 'The endpoint with its new secret'), ...errors(400, 401, 403, 404) },
});

const listDeliveriesRoute = createRoute({
  operationId: 'listWebhookDeliveries',
  method: 'get',
  path: '/admin/agents/{agentId}/webhooks/{webhookId}/deliveries',
  tags,
  summary: "An endpoint's deliveries, newest first, with their latest attempts (status code, duration, error)",
  security,
  request: { params: webhookParams, query: adminPageQuery(listDeliveriesQuerySchema.shape) },
  responses: { 200: jsonResponse(pageEnvelopeOf(deliverySchema), 'A page of deliveries'), ...errors(400, 401, 403, 404) },
});

const redeliverRoute = createRoute({
  operationId: 'redeliverWebhook',
  method: 'post',
  path: '/admin/webhook-deliveries/{deliveryId}/redeliver',
  tags,
  summary: 'Send a failed (or delivered) delivery again',
  description:
    'The delivery becomes pending, due at once, with a new 24-hour retry window; the next drain sends it (same ' +
    '`webhook-id`), or, while its endpoint is disabled, the first drain after an admin enables it again. A delivery ' +
    'that is still pending answers 422 INVALID_STATE.',
  security,
  request: { params: z.object({ deliveryId: uuidParam('deliveryId') }) },
  responses: { 200: jsonResponse(envelopeOf(deliverySchema), 'The delivery, pending again'), ...errors(400, 401, 403, 404, 422) },
});

export function webhookRoutes() {
  const router = newRouter();

  router.openapi(listRoute, async (c) => {
    await requireAdmin(c);
    return c.json(ok(await listWebhooks(c.var.deps, c.req.valid('param').agentId)), 200);
  });

  router.openapi(createRouteDef, async (c) => {
    await requireAdmin(c);
    return c.json(ok(await createWebhook(c.var.deps, c.req.valid('param').agentId, c.req.valid('json'))), 201);
  });

  router.openapi(updateRouteDef, async (c) => {
    await requireAdmin(c);
    const { agentId, webhookId } = c.req.valid('param');
    return c.json(ok(await updateWebhook(c.var.deps, agentId, webhookId, c.req.valid('json'))), 200);
  });

  router.openapi(deleteRouteDef, async (c) => {
    await requireAdmin(c);
    const { agentId, webhookId } = c.req.valid('param');
    return c.json(ok(await deleteWebhook(c.var.deps, agentId, webhookId)), 200);
  });

  router.openapi(rotateRouteDef, async (c) => {
    await requireAdmin(c);
    const { agentId, webhookId } = c.req.valid('param');
    return c.json(ok(await rotateWebhookSecret(c.var.deps, agentId, webhookId)), 200);
  });

  router.openapi(listDeliveriesRoute, async (c) => {
    await requireAdmin(c);
    const { agentId, webhookId } = c.req.valid('param');
    const { items, pagination } = await listDeliveries(c.var.deps, agentId, webhookId, c.req.valid('query'));
    return c.json(okPage(items, pagination), 200);
  });

  router.openapi(redeliverRoute, async (c) => {
    await requireAdmin(c);
    return c.json(ok(await redeliver(c.var.deps, c.req.valid('param').deliveryId)), 200);
  });

  return router;
}
