import { Webhook } from 'standardwebhooks';

/**
 * Agent webhooks are signed with Standard Webhooks (docs/webhooks.md). Verify the raw body as received, before
 * parsing: this checks the signature and that `webhook-timestamp` is within 5 minutes, and returns the event.
 * Throws `WebhookVerificationError` (re-exported) for anything not sent by the marketplace with this secret.
 */

export interface WebhookEvent {
  type: string;
  timestamp: string;
  data: Record<string, unknown>;
}

export function verifyWebhook(secret: string, rawBody: string, headers: Headers | Record<string, string | string[] | undefined>): WebhookEvent {
  const plain: Record<string, string> = {};
  if (headers instanceof Headers) headers.forEach((value, name) => (plain[name] = value));
  else for (const [name, value] of Object.entries(headers)) if (value !== undefined) plain[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : value;
  return new Webhook(secret).verify(rawBody, plain) as WebhookEvent;
}

export { WebhookVerificationError } from 'standardwebhooks';
