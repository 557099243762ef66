import { z } from '@hono/zod-openapi';

/** Agent webhooks as the API shows them (contract.md revision 2, "Agent webhooks"). */

export const WEBHOOK_EVENT_TYPES = [
  'subscription.created',
  'subscription.updated',
  'subscription.canceled',
  'usage.threshold_reached',
  'reservation.expired',
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

export const DELIVERY_STATUSES = ['pending', 'delivered', 'failed'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

const LOOPBACK_HOSTS = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i;

/**
 * Where events are sent: https, or plain http only on a loopback host (a backend on the same machine, tests and
 * local development). No credentials in the URL (they would show on the admin page); at most 2048 characters.
 * Redirects are not followed when delivering, so the URL must answer itself.
 */
export const webhookUrlSchema = z
  .string()
  .max(2048, 'url must be at most 2048 characters')
  .superRefine((value, ctx) => {
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      ctx.addIssue({ code: 'custom', message: 'url must be an absolute URL' });
      return;
    }
    if (url.protocol === 'http:') {
      if (!LOOPBACK_HOSTS.test(url.hostname)) {
        ctx.addIssue({ code: 'custom', message: 'url must use https (plain http only on a loopback host)' });
      }
    } else if (url.protocol !== 'https:') {
      ctx.addIssue({ code: 'custom', message: 'url must use https (plain http only on a loopback host)' });
    }
    if (url.username || url.password) ctx.addIssue({ code: 'custom', message: 'url must not carry credentials' });
  })
  // Kept as the URL parser reads it, which is where deliveries go: an internationalized host in its punycode form (a
  // lookalike of a known domain stands out on the admin page), `\` read as `/` (`http://127.0.0.1\@evil.example/`
  // is listed as `http://127.0.0.1/@evil.example/`, not as an address at evil.example). Found by a review.
  .transform((value) => new URL(value).href)
  // The bound holds for what is kept: percent-encoding and punycode make the parsed form longer than what was typed
  // (1,900 typed "é" are 11,400 characters), which the column refused with a 500 (found by a review).
  .pipe(z.string().max(2048, 'url must be at most 2048 characters once parsed (percent-encoded, punycode host)'))
  .openapi({ example: 'https://agent.example.com/marketplace/webhooks' });

export const webhookEventsSchema = z
  .array(z.enum(WEBHOOK_EVENT_TYPES))
  .min(1, 'events must name at least one event type')
  .max(WEBHOOK_EVENT_TYPES.length)
  .refine((events) => new Set(events).size === events.length, 'events must not repeat a type')
  .openapi({ example: ['subscription.created', 'subscription.updated', 'subscription.canceled'] });

export const createWebhookSchema = z
  .object({ url: webhookUrlSchema, events: webhookEventsSchema })
  .strict()
  .openapi('CreateAgentWebhook');

export const updateWebhookSchema = z
  .object({ url: webhookUrlSchema.optional(), events: webhookEventsSchema.optional(), enabled: z.boolean().optional() })
  .strict()
  .openapi('UpdateAgentWebhook');

export const webhookSchema = z
  .object({
    id: z.uuid(),
    agentId: z.uuid(),
    url: z.string(),
    events: z.array(z.enum(WEBHOOK_EVENT_TYPES)),
    enabled: z.boolean(),
    failingSince: z.string().nullable().openapi({
      description:
        "When the endpoint's current run of failed attempts began; null once an attempt is delivered, and after its url is changed or it is enabled again (a PATCH that changes neither keeps it). A delivery fails for good when an attempt fails 24 hours after the later of this and when the delivery was queued.",
      example: null,
    }),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('AgentWebhook');

export const webhookWithSecretSchema = webhookSchema
  .extend({
    secret: z.string().openapi({
      description: 'The signing secret (Standard Webhooks, `whsec_<base64>`). Shown only in this answer; store it now.',
      example: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    }),
  })
  .openapi('AgentWebhookWithSecret');

export const deliveryAttemptSchema = z
  .object({
    attemptedAt: z.string(),
    durationMs: z.int(),
    statusCode: z.int().nullable().openapi({ description: "The receiver's HTTP status; null when no answer came" }),
    error: z.string().nullable().openapi({ description: 'Why the attempt did not count (non-2xx, timeout, connection error)' }),
  })
  .openapi('WebhookDeliveryAttempt');

export const deliverySchema = z
  .object({
    id: z.uuid(),
    webhookId: z.uuid(),
    eventId: z.uuid().openapi({ description: 'Also the `webhook-id` header of every attempt: receivers deduplicate on it' }),
    eventType: z.enum(WEBHOOK_EVENT_TYPES),
    status: z.enum(DELIVERY_STATUSES),
    attempts: z.int().openapi({ description: 'Attempts since the delivery was created or last redelivered, or since its endpoint was given a new url or enabled again' }),
    nextAttemptAt: z.string().nullable().openapi({ description: 'When the next attempt is due (pending only)' }),
    lastAttemptAt: z.string().nullable(),
    deliveredAt: z.string().nullable(),
    lastStatusCode: z.int().nullable(),
    lastError: z.string().nullable(),
    createdAt: z.string(),
    payload: z
      .object({ type: z.enum(WEBHOOK_EVENT_TYPES), timestamp: z.string(), data: z.record(z.string(), z.unknown()) })
      .openapi({ description: 'The JSON body sent (`{ type, timestamp, data }`)' }),
    attemptLog: z.array(deliveryAttemptSchema).openapi({ description: 'The latest attempts, newest first (at most 20)' }),
  })
  .openapi('WebhookDelivery');

export const listDeliveriesQuerySchema = z.object({
  status: z
    .enum(DELIVERY_STATUSES)
    .optional()
    .openapi({ param: { name: 'status', in: 'query' }, description: 'Only deliveries with this status' }),
});

export type Webhook = z.infer<typeof webhookSchema>;
export type WebhookWithSecret = z.infer<typeof webhookWithSecretSchema>;
export type Delivery = z.infer<typeof deliverySchema>;
