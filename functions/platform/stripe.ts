import type Stripe from 'stripe';
import type { Config } from './config.ts';

/**
 * The Stripe client, or undefined when STRIPE_SECRET_KEY is not set (free tiers still work; every paid path
 * answers 503 PAYMENTS_NOT_CONFIGURED).
 *
 * Runtime-neutral: the package resolves to its Node build on Node (node:http client with keep-alive, measured
 * faster than fetch against a local server) and to its worker build on Deno (fetch). Webhooks are verified with
 * the WebCrypto (SubtleCrypto) provider, which both runtimes have, so one code path (`constructEventAsync`)
 * serves Node and Deno. The API version is the one the SDK
 * pins (Stripe.API_VERSION), so response shapes match the SDK's types. STRIPE_API_URL sends every call to a
 * Stripe-compatible server instead (the tests' fake, a local mock).
 *
 * The SDK is imported only when Stripe is configured: loaded, it holds about 8 MB of an idle service's memory,
 * which a marketplace with free tiers only has no use for.
 */
export interface Payments {
  stripe: Stripe;
  /** Undefined when STRIPE_WEBHOOK_SECRET is not set: the webhook then refuses every delivery. */
  webhookSecret: string | undefined;
  cryptoProvider: ReturnType<typeof Stripe.createSubtleCryptoProvider>;
}

export async function createPayments(config: Config): Promise<Payments | undefined> {
  if (!config.stripe) return undefined;
  const { default: Stripe } = await import('stripe');
  const { secretKey, webhookSecret, apiUrl } = config.stripe;
  const target = apiUrl ? new URL(apiUrl) : undefined;
  const stripe = new Stripe(secretKey, {
    apiVersion: Stripe.API_VERSION,
    maxNetworkRetries: 2,
    timeout: 20_000,
    telemetry: false,
    ...(target
      ? {
          host: target.hostname,
          port: target.port || (target.protocol === 'https:' ? 443 : 80),
          protocol: target.protocol === 'https:' ? ('https' as const) : ('http' as const),
        }
      : {}),
  });
  return { stripe, webhookSecret, cryptoProvider: Stripe.createSubtleCryptoProvider() };
}

export type { Stripe };
