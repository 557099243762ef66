import { createRoute, z } from '@hono/zod-openapi';
import { tierSchema } from '../catalog/index.ts';
import { requireAdmin, requireUser, requireWithinAgent } from '../http/access.ts';
import { envelopeOf, ok } from '../http/envelope.ts';
import { ApiError, notFound } from '../http/errors.ts';
import { askerOf, clientSubject, enforceRateLimit } from '../http/rate-limit.ts';
import { takeAnonymousAllowance } from './allowances.ts';
import { errors, jsonBody, jsonResponse, newRouter, oneLineName, uuidParam, SECURITY } from '../http/router.ts';
import { cancelMySubscription, cancelSubscription } from './cancel-subscription.ts';
import {
  CHECKOUT_SESSION_ID,
  completeAnonymousCheckout,
  createCheckoutLink,
  startAnonymousCheckout,
  startCheckout,
  verifyCheckoutSession,
} from './checkout.ts';
import { claimPage } from './claim-page.ts';
import { claimPurchase } from './claim-purchase.ts';
import { createPortalSession } from './portal.ts';
import { accountBillingPage, checkoutCanceledPage, checkoutSuccessPage } from './return-pages.ts';
import { listUserSubscriptions } from './subscription-queries.ts';
import { findActiveSubscription, subscriptionSchema } from './subscriptions.ts';
import { cancelPendingTierChange, changeSubscriptionTier } from './tier-changes.ts';
import { createTier, deleteTier } from './tiers.ts';
import { handleStripeWebhook } from './webhook.ts';

/**
 * Billing over HTTP: tiers with Stripe prices, checkout (signed-in, anonymous, admin links), the customer
 * portal, the user's subscriptions, admin tier changes and cancellation, and the Stripe webhook.
 */

const security = SECURITY.sessionOrBearer;

const sessionId = () =>
  z.string().regex(CHECKOUT_SESSION_ID, 'sessionId must be a Stripe Checkout Session id (cs_...)');
const sessionIdParam = sessionId().openapi({ param: { name: 'sessionId', in: 'path' }, example: 'cs_test_a1b2c3' });

const returnUrl = (what: string) =>
  z.url().max(2048).optional().openapi({ description: `${what}; must be on the front end's or the service's own origin` });

const checkoutBody = z
  .object({
    tierId: z.uuid(),
    successUrl: returnUrl('Where Stripe sends the buyer after paying; may contain {CHECKOUT_SESSION_ID}'),
    cancelUrl: returnUrl('Where Stripe sends the buyer who gives up'),
  })
  .strict();

const checkoutLinkSchema = z
  .object({
    checkoutUrl: z.url().openapi({ example: 'https://checkout.stripe.com/c/pay/cs_test_a1b2c3' }),
    sessionId: z.string().openapi({ example: 'cs_test_a1b2c3' }),
  })
  .openapi('CheckoutLink');

const freeCheckoutSchema = z.object({ subscription: subscriptionSchema }).openapi('FreeCheckout');

const checkoutSessionSchema = z
  .object({
    sessionId: z.string(),
    status: z.string().nullable().openapi({ example: 'complete', description: 'Stripe: open, complete or expired' }),
    paymentStatus: z.string().openapi({ example: 'paid' }),
    agentId: z.uuid().nullable(),
    tierId: z.uuid().nullable(),
    // A union, not .nullable(): `.openapi()` on a nullable registered schema is emitted as allOf [Subscription, null],
    // which no null satisfies, and the generated client typed the field as never null (review 56).
    subscription: z.union([subscriptionSchema, z.null()]).openapi({ description: 'The local subscription once the webhook has placed it; null until then' }),
  })
  .openapi('CheckoutSession');

const completedCheckoutSchema = z
  .object({
    subscription: subscriptionSchema,
    user: z.object({ id: z.string(), email: z.string() }),
    created: z.boolean().openapi({ description: 'The account was created for this purchase: a set-password mail was sent' }),
  })
  .openapi('CompletedAnonymousCheckout');

const claimMailedSchema = z
  .object({
    claim: z.literal('mailed').openapi({
      description:
        'An unverified account holds the buyer\'s email: nothing was attached to it; the address was mailed a claim link',
    }),
  })
  .openapi('AnonymousPurchaseClaimMailed');

const claimedPurchaseSchema = z
  .object({
    subscription: subscriptionSchema,
    user: z.object({ id: z.string(), email: z.string() }),
    passwordResetToken: z.string().openapi({
      description: 'The set-password step: POST /api/auth/reset-password { token: passwordResetToken, newPassword }',
    }),
  })
  .openapi('ClaimedPurchase');

const createTierBody = z
  .object({
    name: oneLineName(100),
    priceCents: z.int().min(0).max(99_999_999),
    currency: z
      .string()
      .regex(/^[A-Za-z]{3}$/, 'currency must be an ISO 4217 code')
      .transform((c) => c.toLowerCase())
      .openapi({ example: 'usd' }),
    interval: z.enum(['month', 'year']),
    isPublic: z.boolean(),
    features: z.array(z.string().trim().min(1).max(200)).max(50),
  })
  .strict()
  .openapi('CreateTier');

const deletedSchema = z.object({ id: z.uuid() });

// ------------------------------------------------------------------ routes

const createTierRoute = createRoute({
  operationId: 'createTier',
  method: 'post',
  path: '/agents/{agentId}/pricing',
  tags: ['Pricing tiers'],
  summary: 'Create a tier; a paid tier also gets a Stripe product and recurring price when Stripe is configured',
  security,
  request: { params: z.object({ agentId: uuidParam('agentId') }), body: jsonBody(createTierBody) },
  responses: { 201: jsonResponse(envelopeOf(tierSchema), 'The created tier'), ...errors(400, 401, 403, 404, 409, 503) },
});

const deleteTierRoute = createRoute({
  operationId: 'deleteTier',
  method: 'delete',
  path: '/agents/{agentId}/pricing/{tierId}',
  tags: ['Pricing tiers'],
  summary: 'Delete a tier: archives its Stripe product and price; kept (archived, hidden) while subscriptions use it',
  security,
  request: { params: z.object({ agentId: uuidParam('agentId'), tierId: uuidParam('tierId') }) },
  responses: { 200: jsonResponse(envelopeOf(deletedSchema), 'The deleted tier id'), ...errors(401, 403, 404, 503) },
});

const listMySubscriptionsRoute = createRoute({
  operationId: 'listMySubscriptions',
  method: 'get',
  path: '/me/subscriptions',
  tags: ['Subscriptions'],
  summary: "The signed-in user's subscriptions, newest first (not paginated)",
  security,
  responses: { 200: jsonResponse(envelopeOf(z.array(subscriptionSchema)), 'Subscriptions'), ...errors(401, 'cookieRead') },
});

const getMySubscriptionRoute = createRoute({
  operationId: 'getMySubscription',
  method: 'get',
  path: '/me/subscriptions/{agentId}',
  tags: ['Subscriptions'],
  summary: 'The active (active or past_due) subscription to an agent; 404 when there is none',
  security,
  request: { params: z.object({ agentId: uuidParam('agentId') }) },
  responses: { 200: jsonResponse(envelopeOf(subscriptionSchema), 'The active subscription'), ...errors(400, 401, 404, 'agentPath', 'cookieRead') },
});

const startCheckoutRoute = createRoute({
  operationId: 'startCheckout',
  method: 'post',
  path: '/me/checkout',
  tags: ['Subscriptions'],
  summary: 'Free tier: the subscription starts now (201). Paid tier: a Stripe Checkout URL (200); the webhook places the subscription',
  security,
  request: { body: jsonBody(checkoutBody) },
  responses: {
    200: jsonResponse(envelopeOf(checkoutLinkSchema), 'Paid tier: go to checkoutUrl'),
    201: jsonResponse(envelopeOf(freeCheckoutSchema), 'Free tier: the subscription'),
    ...errors(400, 401, 404, 409, 422, 429, 503, 'cookieWrite', 'withinAgent'),
  },
});

const verifyCheckoutRoute = createRoute({
  operationId: 'verifyCheckoutSession',
  method: 'get',
  path: '/me/checkout/{sessionId}',
  tags: ['Subscriptions'],
  summary: "Read-through to Stripe for one of the user's own checkout sessions; writes nothing",
  security,
  request: { params: z.object({ sessionId: sessionIdParam }) },
  responses: { 200: jsonResponse(envelopeOf(checkoutSessionSchema), 'The session as Stripe sees it'), ...errors(400, 401, 404, 429, 503, 'withinAgent', 'cookieRead') },
});

const cancelMySubscriptionRoute = createRoute({
  operationId: 'cancelMySubscription',
  method: 'post',
  path: '/me/subscriptions/{agentId}/cancel',
  tags: ['Subscriptions'],
  summary: 'Cancel: a paid tier at period end (access kept until then), a free tier now, a paid one that grants nothing (incomplete) now',
  security,
  request: { params: z.object({ agentId: uuidParam('agentId') }) },
  responses: { 200: jsonResponse(envelopeOf(subscriptionSchema), 'The subscription'), ...errors(400, 401, 403, 404, 422, 429, 503) },
});

const createPortalSessionRoute = createRoute({
  operationId: 'createPortalSession',
  method: 'post',
  path: '/me/billing-portal',
  tags: ['Subscriptions'],
  summary: "Stripe customer portal: overview, or a deep link to cancel the subscription to `agentId`",
  security,
  request: {
    body: jsonBody(
      z
        .object({
          flow: z.enum(['overview', 'cancel']).default('overview'),
          agentId: z.uuid().optional(),
          returnUrl: returnUrl('Where the portal sends the user back'),
        })
        .strict(),
    ),
  },
  responses: { 200: jsonResponse(envelopeOf(z.object({ url: z.url() })), 'Open this URL'), ...errors(400, 401, 404, 422, 429, 503, 'cookieWrite', 'withinAgent') },
});

const startAnonymousCheckoutRoute = createRoute({
  operationId: 'startAnonymousCheckout',
  method: 'post',
  path: '/checkout/anonymous',
  tags: ['Subscriptions'],
  summary: 'Checkout without an account: Stripe collects the email; the account is found or made on completion',
  request: { body: jsonBody(checkoutBody) },
  responses: { 200: jsonResponse(envelopeOf(checkoutLinkSchema), 'Go to checkoutUrl'), ...errors(400, 404, 422, 429, 503) },
});

const completeAnonymousCheckoutRoute = createRoute({
  operationId: 'completeAnonymousCheckout',
  method: 'post',
  path: '/checkout/anonymous/complete',
  tags: ['Subscriptions'],
  summary:
    "Success page of an anonymous checkout: a new or verified account gets the subscription (200); when an unverified account holds the buyer's email, nothing attaches and the address is mailed a claim link (202)",
  request: { body: jsonBody(z.object({ sessionId: sessionId().openapi({ example: 'cs_test_a1b2c3' }) }).strict()) },
  responses: {
    200: jsonResponse(envelopeOf(completedCheckoutSchema), 'The subscription and its account'),
    202: jsonResponse(envelopeOf(claimMailedSchema), 'Claim link mailed to the buyer\'s address'),
    ...errors(400, 404, 422, 429, 503),
  },
});

const claimAnonymousPurchaseRoute = createRoute({
  operationId: 'claimAnonymousPurchase',
  method: 'post',
  path: '/checkout/anonymous/claim',
  tags: ['Subscriptions'],
  summary:
    'Use a mailed claim link: verifies the address, attaches the purchase to the account holding it (ending its sessions and password if it was unverified) and returns the set-password token',
  request: {
    body: jsonBody(
      z
        .object({
          token: z
            .string()
            .regex(/^[A-Za-z0-9_-]{16,200}$/, 'token must be the claim token from the mailed link')
            .openapi({ description: 'The `token` of the mailed link (sent in the body, so it is in no URL)' }),
        })
        .strict(),
    ),
  },
  responses: {
    200: jsonResponse(envelopeOf(claimedPurchaseSchema), 'The purchase is attached'),
    ...errors(400, 404, 422, 429, 503),
  },
});

const changeTierRoute = createRoute({
  operationId: 'changeSubscriptionTier',
  method: 'post',
  path: '/admin/subscriptions/{subscriptionId}/change-tier',
  tags: ['Subscriptions (admin)'],
  summary: 'Upgrade (prorated, invoiced now, applied once paid) or downgrade (from the next period)',
  security,
  request: { params: z.object({ subscriptionId: uuidParam('subscriptionId') }), body: jsonBody(z.object({ tierId: z.uuid() }).strict()) },
  responses: { 200: jsonResponse(envelopeOf(subscriptionSchema), 'The subscription with its pending change'), ...errors(400, 401, 403, 404, 422, 503) },
});

const cancelPendingRoute = createRoute({
  operationId: 'cancelPendingTierChange',
  method: 'delete',
  path: '/admin/subscriptions/{subscriptionId}/pending-change',
  tags: ['Subscriptions (admin)'],
  summary: 'Drop a pending tier change: voids the proration invoice (upgrade) or releases the schedule (downgrade)',
  security,
  request: { params: z.object({ subscriptionId: uuidParam('subscriptionId') }) },
  responses: { 200: jsonResponse(envelopeOf(subscriptionSchema), 'The subscription'), ...errors(400, 401, 403, 404, 422, 503) },
});

const cancelSubscriptionRoute = createRoute({
  operationId: 'cancelSubscription',
  method: 'post',
  path: '/admin/subscriptions/{subscriptionId}/cancel',
  tags: ['Subscriptions (admin)'],
  summary: 'Cancel at period end (default) or now (`immediate: true`); free tiers end now',
  security,
  request: {
    params: z.object({ subscriptionId: uuidParam('subscriptionId') }),
    body: { required: false, content: { 'application/json': { schema: z.object({ immediate: z.boolean().optional() }).strict() } } },
  },
  responses: { 200: jsonResponse(envelopeOf(subscriptionSchema), 'The subscription'), ...errors(400, 401, 403, 404, 422, 503) },
});

const createCheckoutLinkRoute = createRoute({
  operationId: 'createCheckoutLink',
  method: 'post',
  path: '/admin/checkout-links',
  tags: ['Subscriptions (admin)'],
  summary: 'A Stripe Checkout URL for a user and a paid tier (hidden tiers too), for the admin to share',
  security,
  request: { body: jsonBody(z.object({ userId: z.string().min(1).max(255), tierId: z.uuid() }).strict()) },
  responses: { 201: jsonResponse(envelopeOf(checkoutLinkSchema), 'The link'), ...errors(400, 401, 403, 404, 422, 503) },
});

const webhookRoute = createRoute({
  operationId: 'stripeWebhook',
  method: 'post',
  path: '/webhooks/stripe',
  tags: ['Webhook'],
  summary: 'Stripe events, authenticated by the Stripe-Signature header; each event id is processed once',
  request: { headers: z.object({ 'stripe-signature': z.string().optional() }) },
  responses: {
    200: jsonResponse(
      envelopeOf(z.object({ received: z.literal(true), eventId: z.string(), type: z.string(), outcome: z.string() })),
      'Received (also for duplicates and event types that change nothing)',
    ),
    ...errors(400, 503),
  },
});

export function billingRoutes() {
  const router = newRouter();

  router.openapi(createTierRoute, async (c) => {
    await requireAdmin(c);
    const { agentId } = c.req.valid('param');
    return c.json(ok(await createTier(c.var.deps, agentId, c.req.valid('json'))), 201);
  });

  router.openapi(deleteTierRoute, async (c) => {
    await requireAdmin(c);
    const { agentId, tierId } = c.req.valid('param');
    const { id } = await deleteTier(c.var.deps, agentId, tierId);
    return c.json(ok({ id }), 200);
  });

  router.openapi(listMySubscriptionsRoute, async (c) => {
    const user = await requireUser(c);
    const subscriptions = await listUserSubscriptions(c.var.deps, user.userId);
    // An agent's token sees only the user's subscription to that agent (contract.md, Trust boundaries).
    return c.json(ok(user.agentId ? subscriptions.filter((s) => s.agentId === user.agentId) : subscriptions), 200);
  });

  router.openapi(getMySubscriptionRoute, async (c) => {
    const user = await requireUser(c);
    const { agentId } = c.req.valid('param');
    const sub = await findActiveSubscription(c.var.deps.database.db, c.var.deps.clock, user.userId, agentId);
    if (!sub) throw notFound('Active subscription', { agentId });
    return c.json(ok(sub), 200);
  });

  router.openapi(startCheckoutRoute, async (c) => {
    const user = await requireUser(c);
    const result = await startCheckout(c.var.deps, askerOf(c, user), c.req.valid('json'));
    if (result.kind === 'free') return c.json(ok({ subscription: result.subscription }), 201);
    return c.json(ok({ checkoutUrl: result.checkoutUrl, sessionId: result.sessionId }), 200);
  });

  router.openapi(verifyCheckoutRoute, async (c) => {
    const user = await requireUser(c);
    const { sessionId } = c.req.valid('param');
    return c.json(ok(await verifyCheckoutSession(c.var.deps, askerOf(c, user), sessionId)), 200);
  });

  router.openapi(cancelMySubscriptionRoute, async (c) => {
    const user = await requireUser(c);
    const { agentId } = c.req.valid('param');
    return c.json(ok(await cancelMySubscription(c.var.deps, askerOf(c, user), agentId)), 200);
  });

  router.openapi(createPortalSessionRoute, async (c) => {
    const user = await requireUser(c);
    const input = c.req.valid('json');
    // An agent's token may open only the cancel flow of its own agent: the overview shows every subscription and
    // payment method of the user.
    if (user.agentId && input.flow !== 'cancel') {
      // Said as it is: the request names no agent, so "names another agent" misled (review 94's lead).
      throw new ApiError('FORBIDDEN', "An agent's access token opens only the portal's cancel flow of its own agent: send { flow: 'cancel', agentId }", {
        flow: input.flow,
      });
    }
    if (input.flow === 'cancel' && input.agentId) requireWithinAgent(user, input.agentId);
    return c.json(ok(await createPortalSession(c.var.deps, askerOf(c, user), input)), 200);
  });

  router.openapi(startAnonymousCheckoutRoute, async (c) => {
    // Public: the buyer has no account yet. Limited per client IP like the other public writes.
    await enforceRateLimit(c, 'checkout-anonymous', c.var.deps.config.authRateLimitPerMinute);
    await takeAnonymousAllowance(c.var.deps, clientSubject(c), 'checkout');
    return c.json(ok(await startAnonymousCheckout(c.var.deps, c.req.valid('json'))), 200);
  });

  router.openapi(completeAnonymousCheckoutRoute, async (c) => {
    // Public (the success page): the unguessable Checkout Session id, re-read from Stripe, is the credential.
    await enforceRateLimit(c, 'checkout-anonymous-complete', c.var.deps.config.authRateLimitPerMinute);
    await takeAnonymousAllowance(c.var.deps, clientSubject(c), 'completion');
    const { sessionId } = c.req.valid('json');
    const result = await completeAnonymousCheckout(c.var.deps, sessionId);
    if (result.kind === 'claim') return c.json(ok({ claim: 'mailed' as const }), 202);
    const { subscription, user, created } = result;
    return c.json(ok({ subscription, user, created }), 200);
  });

  router.openapi(claimAnonymousPurchaseRoute, async (c) => {
    // Public: the single-use token from the mail is the credential (only its hash is stored).
    await enforceRateLimit(c, 'checkout-anonymous-claim', c.var.deps.config.authRateLimitPerMinute);
    return c.json(ok(await claimPurchase(c.var.deps, c.req.valid('json').token)), 200);
  });

  // The page the claim mail points to when there is no FRONTEND_URL (outside the OpenAPI document, like /sign-in).
  router.get('/claim', (c) => claimPage(c));
  // Stripe's default return addresses, served likewise when there is no FRONTEND_URL.
  router.get('/checkout/success', (c) => checkoutSuccessPage(c));
  router.get('/checkout/canceled', (c) => checkoutCanceledPage(c));
  router.get('/account/billing', (c) => accountBillingPage(c));

  router.openapi(changeTierRoute, async (c) => {
    await requireAdmin(c);
    const { subscriptionId } = c.req.valid('param');
    const { tierId } = c.req.valid('json');
    return c.json(ok(await changeSubscriptionTier(c.var.deps, subscriptionId, tierId)), 200);
  });

  router.openapi(cancelPendingRoute, async (c) => {
    await requireAdmin(c);
    const { subscriptionId } = c.req.valid('param');
    return c.json(ok(await cancelPendingTierChange(c.var.deps, subscriptionId)), 200);
  });

  router.openapi(cancelSubscriptionRoute, async (c) => {
    await requireAdmin(c);
    const { subscriptionId } = c.req.valid('param');
    // The body is optional ("action endpoints accept a POST with no body"); zod validated it when present.
    const body = c.req.header('content-type') ? c.req.valid('json') : {};
    return c.json(ok(await cancelSubscription(c.var.deps, subscriptionId, body?.immediate ?? false)), 200);
  });

  router.openapi(createCheckoutLinkRoute, async (c) => {
    await requireAdmin(c);
    return c.json(ok(await createCheckoutLink(c.var.deps, c.req.valid('json'))), 201);
  });

  router.openapi(webhookRoute, async (c) => {
    // Public: authenticated by Stripe's signature over the raw body, checked before anything else happens.
    const payload = await c.req.text();
    const result = await handleStripeWebhook(c.var.deps, payload, c.req.header('stripe-signature'));
    return c.json(ok(result), 200);
  });

  return router;
}
