import { createRoute, z } from '@hono/zod-openapi';
import { requireAdmin } from '../../http/access.ts';
import { viewerIsAdmin } from './viewer.ts';
import { envelopeOf, ok } from '../../http/envelope.ts';
import { errors, jsonBody, jsonResponse, newRouter, uuidParam } from '../../http/router.ts';
import { requireAgent } from '../agents.ts';
import { enterpriseTier, enterpriseTierSchema, listStoredTiers, setTierVisibility, tierSchema } from '../tiers.ts';
import { security } from './agents.ts';

/** The pricing page of an agent (tiers, cheapest first, then the static Enterprise tier) and the visibility toggle. */

const listTiersRoute = createRoute({
  operationId: 'listTiers',
  method: 'get',
  path: '/agents/{agentId}/pricing',
  tags: ['Pricing'],
  summary: 'Tiers of an agent, cheapest first, ending with the static Enterprise tier; hidden tiers for admins only',
  request: { params: z.object({ agentId: uuidParam('agentId') }) },
  responses: {
    200: jsonResponse(envelopeOf(z.array(z.union([tierSchema, enterpriseTierSchema]))), 'The pricing tiers'),
    ...errors(400, 404, 'agentPath'),
  },
});

const setTierVisibilityRoute = createRoute({
  operationId: 'setTierVisibility',
  method: 'patch',
  path: '/agents/{agentId}/pricing/{tierId}/visibility',
  tags: ['Pricing'],
  summary: 'Show or hide a tier; changes nothing else (not the price, not the payment provider)',
  security,
  request: {
    params: z.object({ agentId: uuidParam('agentId'), tierId: uuidParam('tierId') }),
    body: jsonBody(z.object({ isPublic: z.boolean() }).openapi('TierVisibility')),
  },
  responses: { 200: jsonResponse(envelopeOf(tierSchema), 'The tier'), ...errors(400, 401, 403, 404) },
});

export function pricingRoutes() {
  const router = newRouter();

  router.openapi(listTiersRoute, async (c) => {
    // Public: anyone may see an agent's public prices; admins also see hidden (custom) tiers.
    const db = c.var.deps.database.db;
    const { agentId } = c.req.valid('param');
    const admin = await viewerIsAdmin(c);
    await requireAgent(db, agentId, admin);
    const tiers = await listStoredTiers(db, agentId, admin);
    return c.json(ok([...tiers, enterpriseTier(agentId)]), 200);
  });

  router.openapi(setTierVisibilityRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    const { agentId, tierId } = c.req.valid('param');
    const tier = await setTierVisibility(deps.database.db, deps.clock.now(), { agentId, tierId, isPublic: c.req.valid('json').isPublic });
    return c.json(ok(tier), 200);
  });

  return router;
}
