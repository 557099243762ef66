import { createRoute, z } from '@hono/zod-openapi';
import { requireAdmin } from '../../http/access.ts';
import { envelopeOf, ok, okPage, pageEnvelopeOf } from '../../http/envelope.ts';
import { adminPageQuery } from '../../http/pagination.ts';
import { errors, jsonBody, jsonResponse, newRouter, uuidParam, SECURITY } from '../../http/router.ts';
import { grantAddon, listAddons, revokeAddon } from '../addons.ts';
import { listQuotaLedger } from '../ledger.ts';
import { addonSchema, grantAddonBody, ledgerEntrySchema, usageRecordSchema } from '../schemas.ts';
import { getSubscriptionUsage } from '../usage.ts';

/** Admin metering on one subscription: addons, the quota ledger, usage of every metric. */

const subscriptionParams = z.object({ subscriptionId: uuidParam('subscriptionId') });
const addonParams = subscriptionParams.extend({ addonId: uuidParam('addonId') });
const security = SECURITY.sessionOrBearer;
const tags = ['Subscriptions (admin)'];

const routes = {
  grant: createRoute({
    operationId: 'grantAddon',
    method: 'post',
    path: '/admin/subscriptions/{subscriptionId}/addons',
    tags,
    summary: 'Grant a quota addon on a metric (`one_cycle`: rolling metrics only, counts in the current billing period)',
    security,
    request: { params: subscriptionParams, body: jsonBody(grantAddonBody) },
    responses: { 201: jsonResponse(envelopeOf(addonSchema), 'Granted'), ...errors(400, 401, 403, 404, 422) },
  }),
  list: createRoute({
    operationId: 'listAddons',
    method: 'get',
    path: '/admin/subscriptions/{subscriptionId}/addons',
    tags,
    summary: 'Addons of the subscription, active and revoked, newest first',
    security,
    request: { params: subscriptionParams },
    responses: { 200: jsonResponse(envelopeOf(z.array(addonSchema)), 'Addons'), ...errors(400, 401, 403, 404) },
  }),
  revoke: createRoute({
    operationId: 'revokeAddon',
    method: 'post',
    path: '/admin/subscriptions/{subscriptionId}/addons/{addonId}/revoke',
    tags,
    summary: 'Revoke an addon (idempotent: returns the revoked record every time)',
    security,
    request: { params: addonParams },
    responses: { 200: jsonResponse(envelopeOf(addonSchema), 'The revoked addon'), ...errors(400, 401, 403, 404) },
  }),
  ledger: createRoute({
    operationId: 'listQuotaLedger',
    method: 'get',
    path: '/admin/subscriptions/{subscriptionId}/ledger',
    tags,
    summary: 'Quota events of the subscription, newest first: increments (admitted and denied), decrements, addons, quota changes',
    security,
    request: { params: subscriptionParams, query: adminPageQuery({}) },
    responses: { 200: jsonResponse(pageEnvelopeOf(ledgerEntrySchema), 'A page of ledger entries'), ...errors(400, 401, 403, 404) },
  }),
  usage: createRoute({
    operationId: 'getSubscriptionUsage',
    method: 'get',
    path: '/admin/subscriptions/{subscriptionId}/usage',
    tags,
    summary: "Usage of every metric of the subscription's agent",
    security,
    request: { params: subscriptionParams },
    responses: { 200: jsonResponse(envelopeOf(z.array(usageRecordSchema)), 'One usage record per metric'), ...errors(400, 401, 403, 404) },
  }),
};

export function meteringAdminRoutes() {
  const router = newRouter();

  router.openapi(routes.grant, async (c) => {
    const admin = await requireAdmin(c);
    const { subscriptionId } = c.req.valid('param');
    const { database, clock } = c.var.deps;
    return c.json(ok(await grantAddon(database.db, clock.now(), { actorUserId: admin.userId, subscriptionId, addon: c.req.valid('json') })), 201);
  });

  router.openapi(routes.list, async (c) => {
    await requireAdmin(c);
    const { subscriptionId } = c.req.valid('param');
    const { database, clock } = c.var.deps;
    return c.json(ok(await listAddons(database.db, clock.now(), subscriptionId)), 200);
  });

  router.openapi(routes.revoke, async (c) => {
    const admin = await requireAdmin(c);
    const { subscriptionId, addonId } = c.req.valid('param');
    const { database, clock } = c.var.deps;
    return c.json(ok(await revokeAddon(database.db, clock.now(), { actorUserId: admin.userId, subscriptionId, addonId })), 200);
  });

  router.openapi(routes.ledger, async (c) => {
    await requireAdmin(c);
    const { subscriptionId } = c.req.valid('param');
    const { database, cursors } = c.var.deps;
    const { items, pagination } = await listQuotaLedger(database.db, cursors, subscriptionId, c.req.valid('query'));
    return c.json(okPage(items, pagination), 200);
  });

  router.openapi(routes.usage, async (c) => {
    await requireAdmin(c);
    const { subscriptionId } = c.req.valid('param');
    const { database, clock } = c.var.deps;
    return c.json(ok(await getSubscriptionUsage(database.db, clock, subscriptionId)), 200);
  });

  return router;
}
