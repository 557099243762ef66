import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ANONYMOUS_COMPLETIONS_PER_DAY } from '../../functions/billing/allowances.ts';
import { startBillingWorld, type BillingWorld } from './support.ts';

/**
 * POST /checkout/anonymous/complete is public and reads the Checkout Session from Stripe before it can tell whether the
 * id is anyone's. Bounded only by the per-minute limit per address, one address made 43,200 Stripe reads a day with
 * made-up ids, under the marketplace's one Stripe account whose API rate limit every buyer's payments share: the way
 * around the signed-in read's daily allowance and the anonymous checkouts'. Now ANONYMOUS_COMPLETIONS_PER_DAY per
 * address (functions/billing/allowances.ts), far above the once or twice a success page completes; and since
 * 20261127004400 a made-up id is refused before Stripe is asked at all (only sessions we made are completed).
 */
const PER_MINUTE = 30; // the production default of AUTH_RATE_LIMIT_PER_MINUTE (tests run with 0: no limit)
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld({ env: { AUTH_RATE_LIMIT_PER_MINUTE: String(PER_MINUTE) } });
});
afterAll(() => w.close());

const sessionReads = () => w.fake.requests.filter((r) => r.method === 'GET' && r.path.startsWith('/v1/checkout/sessions/')).length;

describe('completing anonymous checkouts of made-up sessions', () => {
  it(`attack: one address reaches Stripe at most ${ANONYMOUS_COMPLETIONS_PER_DAY} times a day, a minute's worth at a time`, async () => {
    const before = sessionReads();
    const statuses: number[] = [];
    for (let i = 0; i < ANONYMOUS_COMPLETIONS_PER_DAY + 20; i++) {
      if (i % PER_MINUTE === 0) w.t.clock.advance(61_000);
      const res = await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId: `cs_test_madeup${i}x${Date.now()}` } });
      statuses.push(res.status);
    }
    // Made-up ids: refused by the record of the sessions we made (migration 20261127004400), Stripe never asked.
    expect(sessionReads() - before).toBe(0);
    expect(statuses.slice(0, ANONYMOUS_COMPLETIONS_PER_DAY).every((s) => s === 404)).toBe(true);
    expect(statuses.slice(ANONYMOUS_COMPLETIONS_PER_DAY)).toEqual(Array(20).fill(429));
  });
});
