/**
 * Run under Deno by webhook-deno.once.test.ts: verifies Stripe signatures with the app's own Stripe client
 * (functions/platform/stripe.ts, resolved through the edge import map to the SDK's worker build) and prints
 * one line per case, so the test can check that the webhook's verification path works on the edge runtime.
 */
import { loadConfig } from '../../functions/platform/config.ts';
import { createPayments } from '../../functions/platform/stripe.ts';

declare const Deno: { env: { get(name: string): string | undefined } };

const input = JSON.parse(Deno.env.get('VERIFY_INPUT')!) as { secret: string; cases: Array<{ payload: string; header: string }> };
const payments = (await createPayments(
  loadConfig({ AUTH_SECRET: 'deno-verify-secret-deno-verify-secret!!', STRIPE_SECRET_KEY: 'sk_test_deno', STRIPE_WEBHOOK_SECRET: input.secret }),
))!;
for (const c of input.cases) {
  try {
    const event = await payments.stripe.webhooks.constructEventAsync(c.payload, c.header, input.secret, undefined, payments.cryptoProvider);
    console.log(`verified ${event.id}`);
  } catch {
    console.log('rejected');
  }
}
