import { createRoute, z } from '@hono/zod-openapi';
import { isAdmin, requireAdmin } from '../../http/access.ts';
import { envelopeOf, ok } from '../../http/envelope.ts';
import { errors, jsonBody, jsonResponse, newRouter, uuidParam, SECURITY } from '../../http/router.ts';
import {
  createMetricDefinition,
  deleteMetricDefinition,
  getMetricDefinition,
  listMetricDefinitions,
  updateMetricDefinition,
} from '../metric-definitions.ts';
import {
  createMetricDefinitionBody,
  metricDefinitionSchema,
  tierQuotaSchema,
  updateMetricDefinitionBody,
  upsertTierQuotaBody,
} from '../schemas.ts';
import { deleteTierQuota, listTierQuotas, upsertTierQuota } from '../tier-quotas.ts';

/** Metric definitions of an agent and the quotas its tiers set on them. */

const agentParams = z.object({ agentId: uuidParam('agentId') });
const metricParams = agentParams.extend({ metricId: uuidParam('metricId') });
const tierParams = agentParams.extend({ tierId: uuidParam('tierId') });
const quotaParams = tierParams.extend({ metricId: uuidParam('metricId') });
const deleted = envelopeOf(z.object({ id: z.uuid() }));
const adminOnly = SECURITY.sessionOrBearer;

const routes = {
  list: createRoute({
    operationId: 'listMetricDefinitions',
    method: 'get',
    path: '/agents/{agentId}/metric-definitions',
    tags: ['Metrics and quotas'],
    summary: "The agent's metric definitions (not paginated)",
    request: { params: agentParams },
    responses: { 200: jsonResponse(envelopeOf(z.array(metricDefinitionSchema)), 'Metric definitions'), ...errors(400, 404, 'agentPath') },
  }),
  create: createRoute({
    operationId: 'createMetricDefinition',
    method: 'post',
    path: '/agents/{agentId}/metric-definitions',
    tags: ['Metrics and quotas'],
    summary: 'Define a metric on the agent (slug and kind are immutable afterwards)',
    security: adminOnly,
    request: { params: agentParams, body: jsonBody(createMetricDefinitionBody) },
    responses: { 201: jsonResponse(envelopeOf(metricDefinitionSchema), 'Created'), ...errors(400, 401, 403, 404, 409) },
  }),
  get: createRoute({
    operationId: 'getMetricDefinition',
    method: 'get',
    path: '/agents/{agentId}/metric-definitions/{metricId}',
    tags: ['Metrics and quotas'],
    summary: 'One metric definition',
    request: { params: metricParams },
    responses: { 200: jsonResponse(envelopeOf(metricDefinitionSchema), 'The metric definition'), ...errors(400, 404, 'agentPath') },
  }),
  update: createRoute({
    operationId: 'updateMetricDefinition',
    method: 'patch',
    path: '/agents/{agentId}/metric-definitions/{metricId}',
    tags: ['Metrics and quotas'],
    summary: 'Rename a metric or change its unit; slug and kind are immutable (422 IMMUTABLE_FIELD)',
    security: adminOnly,
    request: { params: metricParams, body: jsonBody(updateMetricDefinitionBody) },
    responses: { 200: jsonResponse(envelopeOf(metricDefinitionSchema), 'Updated'), ...errors(400, 401, 403, 404, 422) },
  }),
  delete: createRoute({
    operationId: 'deleteMetricDefinition',
    method: 'delete',
    path: '/agents/{agentId}/metric-definitions/{metricId}',
    tags: ['Metrics and quotas'],
    summary: 'Delete a metric nothing refers to (422 METRIC_IN_USE when usage, addons or ledger rows exist)',
    security: adminOnly,
    request: { params: metricParams },
    responses: { 200: jsonResponse(deleted, 'Deleted, with its tier quota rows'), ...errors(400, 401, 403, 404, 422) },
  }),
  listQuotas: createRoute({
    operationId: 'listTierQuotas',
    method: 'get',
    path: '/agents/{agentId}/pricing/{tierId}/quotas',
    tags: ['Metrics and quotas'],
    summary: "The tier's base quotas, one per metric (a metric without a row is denied)",
    request: { params: tierParams },
    responses: { 200: jsonResponse(envelopeOf(z.array(tierQuotaSchema)), 'Quotas by metric slug'), ...errors(400, 404, 'agentPath') },
  }),
  upsertQuota: createRoute({
    operationId: 'upsertTierQuota',
    method: 'put',
    path: '/agents/{agentId}/pricing/{tierId}/quotas/{metricId}',
    tags: ['Metrics and quotas'],
    summary: "Set the tier's quota on a metric (null = unlimited, 0 = deny); written to subscribers' ledgers",
    security: adminOnly,
    request: { params: quotaParams, body: jsonBody(upsertTierQuotaBody) },
    responses: {
      200: jsonResponse(envelopeOf(tierQuotaSchema), 'Updated'),
      201: jsonResponse(envelopeOf(tierQuotaSchema), 'Created'),
      ...errors(400, 401, 403, 404),
    },
  }),
  deleteQuota: createRoute({
    operationId: 'deleteTierQuota',
    method: 'delete',
    path: '/agents/{agentId}/pricing/{tierId}/quotas/{metricId}',
    tags: ['Metrics and quotas'],
    summary: "Remove the tier's quota row: the metric falls back to 0 (deny) on this tier",
    security: adminOnly,
    request: { params: quotaParams },
    responses: { 200: jsonResponse(deleted, 'Removed; `id` is the metric id'), ...errors(400, 401, 403, 404) },
  }),
};

export function metricRoutes() {
  const router = newRouter();

  // Public: metric definitions are part of an agent's pricing page (unpublished agents: admins only).
  router.openapi(routes.list, async (c) => {
    const { agentId } = c.req.valid('param');
    return c.json(ok(await listMetricDefinitions(c.var.deps.database.db, agentId, await isAdmin(c))), 200);
  });

  router.openapi(routes.create, async (c) => {
    await requireAdmin(c);
    const { agentId } = c.req.valid('param');
    const { database, clock } = c.var.deps;
    return c.json(ok(await createMetricDefinition(database.db, clock.now(), agentId, c.req.valid('json'))), 201);
  });

  // Public, like the list.
  router.openapi(routes.get, async (c) => {
    const { agentId, metricId } = c.req.valid('param');
    return c.json(ok(await getMetricDefinition(c.var.deps.database.db, agentId, metricId, await isAdmin(c))), 200);
  });

  router.openapi(routes.update, async (c) => {
    await requireAdmin(c);
    const { agentId, metricId } = c.req.valid('param');
    const { database, clock } = c.var.deps;
    return c.json(ok(await updateMetricDefinition(database.db, clock.now(), { agentId, metricId, patch: c.req.valid('json') })), 200);
  });

  router.openapi(routes.delete, async (c) => {
    await requireAdmin(c);
    const { agentId, metricId } = c.req.valid('param');
    return c.json(ok(await deleteMetricDefinition(c.var.deps.database.db, agentId, metricId)), 200);
  });

  // Public for public tiers of published agents; otherwise admins only (as the tier itself).
  router.openapi(routes.listQuotas, async (c) => {
    const { agentId, tierId } = c.req.valid('param');
    return c.json(ok(await listTierQuotas(c.var.deps.database.db, agentId, tierId, await isAdmin(c))), 200);
  });

  router.openapi(routes.upsertQuota, async (c) => {
    const admin = await requireAdmin(c);
    const { agentId, tierId, metricId } = c.req.valid('param');
    const { database, clock } = c.var.deps;
    const { quota, created } = await upsertTierQuota(database.db, clock.now(), {
      actorUserId: admin.userId,
      agentId,
      tierId,
      metricId,
      quotaLimit: c.req.valid('json').quotaLimit,
    });
    return created ? c.json(ok(quota), 201) : c.json(ok(quota), 200);
  });

  router.openapi(routes.deleteQuota, async (c) => {
    const admin = await requireAdmin(c);
    const { agentId, tierId, metricId } = c.req.valid('param');
    const { database, clock } = c.var.deps;
    return c.json(ok(await deleteTierQuota(database.db, clock.now(), { actorUserId: admin.userId, agentId, tierId, metricId })), 200);
  });

  return router;
}
