import { createRoute, z } from '@hono/zod-openapi';
import { requireUser, seesEmail } from '../../http/access.ts';
import { viewer } from './viewer.ts';
import { envelopeOf, ok } from '../../http/envelope.ts';
import { ApiError } from '../../http/errors.ts';
import { askerOf, enforceRateLimit } from '../../http/rate-limit.ts';
import { errors, jsonBody, jsonResponse, newRouter, uuidParam } from '../../http/router.ts';
import { requireAgent } from '../agents.ts';
import { createEnterpriseInquiry, requestDemo, takeEngagementAllowance } from '../engagement-requests.ts';
import { demoRequestBody, enterpriseInquiryBody, joinWaitlistBody, waitlistEntrySchema } from '../schemas.ts';
import { joinWaitlist, waitlistStatus } from '../waitlist.ts';
import { security } from './agents.ts';

/** Demo requests, enterprise inquiries, the waitlist of coming-soon agents, and telemetry (not available yet). */

const tags = ['Engagement'];
const agentIdParams = z.object({ agentId: uuidParam('agentId') });
const receiptSchema = z
  .object({ id: z.uuid(), type: z.enum(['demo_request', 'enterprise_inquiry']), agentId: z.uuid(), createdAt: z.string() })
  .openapi('RequestReceipt');

const requestDemoRoute = createRoute({
  operationId: 'requestDemo',
  method: 'post',
  path: '/agents/{agentId}/demo-requests',
  tags,
  summary: 'Ask for a demo: recorded in the interaction feed and mailed to the notification recipients',
  security,
  request: { params: agentIdParams, body: jsonBody(demoRequestBody) },
  responses: { 202: jsonResponse(envelopeOf(receiptSchema), 'Accepted'), ...errors(400, 401, 404, 429, 'agentPath', 'cookieWrite') },
});

const enterpriseInquiryRoute = createRoute({
  operationId: 'createEnterpriseInquiry',
  method: 'post',
  path: '/agents/{agentId}/enterprise-inquiries',
  tags,
  summary: 'Ask about the Enterprise tier (message and company size go to the interaction feed)',
  security,
  request: { params: agentIdParams, body: jsonBody(enterpriseInquiryBody) },
  responses: { 202: jsonResponse(envelopeOf(receiptSchema), 'Accepted'), ...errors(400, 401, 404, 429, 'agentPath', 'cookieWrite') },
});

const waitlistStatusRoute = createRoute({
  operationId: 'getWaitlistStatus',
  method: 'get',
  path: '/agents/{agentId}/waitlist',
  tags,
  summary: 'Whether the signed-in caller’s email is on this agent’s waitlist (false when signed out)',
  request: { params: agentIdParams },
  responses: { 200: jsonResponse(envelopeOf(z.object({ notified: z.boolean() })), 'Waitlist status'), ...errors(400, 404, 'agentPath') },
});

const joinWaitlistRoute = createRoute({
  operationId: 'joinWaitlist',
  method: 'post',
  path: '/agents/{agentId}/waitlist',
  tags,
  summary: 'Join a coming-soon agent’s waitlist: 201 when added, 200 when the email was already on it',
  request: { params: agentIdParams, body: jsonBody(joinWaitlistBody) },
  responses: {
    200: jsonResponse(envelopeOf(waitlistEntrySchema), 'Already on the waitlist'),
    201: jsonResponse(envelopeOf(waitlistEntrySchema), 'Added to the waitlist'),
    ...errors(400, 404, 422, 429, 'agentPath', 'cookieWrite'),
  },
});

const telemetryRoute = createRoute({
  operationId: 'getAgentTelemetry',
  method: 'get',
  path: '/agents/{agentId}/telemetry',
  tags,
  summary: 'Agent telemetry: not available yet (501)',
  request: { params: agentIdParams },
  responses: { ...errors(400, 501, 'agentPath') },
});

export function engagementRoutes() {
  const router = newRouter();

  router.openapi(requestDemoRoute, async (c) => {
    const user = await requireUser(c);
    const { deps } = c.var;
    await enforceRateLimit(c, 'demo-request', deps.config.authRateLimitPerMinute);
    const { agentId } = c.req.valid('param');
    const agent = await requireAgent(deps.database.db, agentId, user.role === 'platform_admin');
    await takeEngagementAllowance(deps, 'demo-request', askerOf(c, user));
    const { interaction } = await requestDemo(
      deps.database.db,
      deps.mailer,
      { agent, requester: user, message: c.req.valid('json').message, publicBaseUrl: deps.config.publicBaseUrl },
      deps.clock.now(),
    );
    return c.json(ok({ id: interaction.id, type: 'demo_request' as const, agentId, createdAt: interaction.createdAt }), 202);
  });

  router.openapi(enterpriseInquiryRoute, async (c) => {
    const user = await requireUser(c);
    const { deps } = c.var;
    await enforceRateLimit(c, 'enterprise-inquiry', deps.config.authRateLimitPerMinute);
    const { agentId } = c.req.valid('param');
    await requireAgent(deps.database.db, agentId, user.role === 'platform_admin');
    await takeEngagementAllowance(deps, 'enterprise-inquiry', askerOf(c, user));
    const interaction = await createEnterpriseInquiry(
      deps.database.db,
      { agentId, requester: user, ...c.req.valid('json') },
      deps.clock.now(),
    );
    return c.json(ok({ id: interaction.id, type: 'enterprise_inquiry' as const, agentId, createdAt: interaction.createdAt }), 202);
  });

  router.openapi(waitlistStatusRoute, async (c) => {
    // Public: anonymous callers get `notified: false`; a signed-in caller learns about their own email only, once
    // verified; an agent's token only when the user granted it the email (seesEmail: else answered as anonymous).
    const { deps } = c.var;
    const { agentId } = c.req.valid('param');
    const principal = await viewer(c);
    await requireAgent(deps.database.db, agentId, principal?.role === 'platform_admin');
    const reader = principal && seesEmail(principal) ? principal.userId : null;
    return c.json(ok(await waitlistStatus(deps.database.db, agentId, reader)), 200);
  });

  router.openapi(joinWaitlistRoute, async (c) => {
    // Public: visitors join without an account; rate limited per client IP like the other public writes.
    const { deps } = c.var;
    await enforceRateLimit(c, 'waitlist', deps.config.authRateLimitPerMinute);
    const { agentId } = c.req.valid('param');
    const principal = await viewer(c);
    const agent = await requireAgent(deps.database.db, agentId, principal?.role === 'platform_admin');
    const { entry, created } = await joinWaitlist(
      deps.database.db,
      agent,
      { email: c.req.valid('json').email, userId: principal?.userId ?? null },
      deps.clock.now(),
    );
    return created ? c.json(ok(entry), 201) : c.json(ok(entry), 200);
  });

  router.openapi(telemetryRoute, async (c) => {
    // Public, and not built: telemetry needs a data source the marketplace does not have yet.
    c.req.valid('param');
    throw new ApiError('NOT_IMPLEMENTED', 'Agent telemetry is not available yet');
  });

  return router;
}
