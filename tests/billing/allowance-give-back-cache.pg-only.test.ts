import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHECKOUTS_PER_DAY } from '../../functions/billing/allowances.ts';
import { first, sql } from '../../functions/platform/db.ts';
import { insertTier } from '../support/fixtures.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, paidTier, startBillingWorld, type BillingWorld } from '../billing/support.ts';

/**
 * Review 102: a free start that writes nothing gives its checkout back. But a checkout refused 429 while that
 * idle start was in flight leaves the app's refusal cache (platform/rate-limits.ts `refusedHere`) refusing the key
 * until the day's window ends, and the give-back (refundToken) never clears it: the user, who has made one start less
 * than the allowance, is refused for the rest of the day on that instance.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w?.close());

const waitingOnLocks = async () =>
  (await first<{ n: number }>(
    w.t.db,
    sql`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`,
  ))!.n;

describe('a free start given back after a concurrent checkout was refused', () => {
  it(`leaves the user one checkout of the day (${CHECKOUTS_PER_DAY - 1} made something)`, async () => {
    const z = await activeAgent(w);
    const zFree = await insertTier(w.t.db, z.id, { priceCents: 0 });
    const y = await activeAgent(w);
    const yPaid = await paidTier(w, y.id);
    const user = await signUp(w.t);
    const key = `billing-checkout|${user.userId}|own`;
    expect((await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: zFree.id } })).status).toBe(201);
    // As if the user's other starts of the day made something: 49 counted in all.
    await sql`update public.rate_limits set hits = ${CHECKOUTS_PER_DAY - 1} where key = ${key}`.execute(w.t.db);

    let idle: Promise<{ status: number }> | undefined;
    let refusedMeanwhile: { status: number } | undefined;
    // The user's double click on the free tier they hold already, slowed at its insert (a tier row lock).
    await w.t.db.transaction().execute(async (trx) => {
      await sql`select 1 from public.tiers where id = ${zFree.id} for update`.execute(trx);
      idle = w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: zFree.id } });
      for (let i = 0; i < 200 && (await waitingOnLocks()) === 0; i++) await new Promise((r) => setTimeout(r, 25));
      // Meanwhile the 50th counted: a paid checkout is refused 429 (right at this moment).
      refusedMeanwhile = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: yPaid.id } });
    });
    expect((await idle!).status).toBe(201); // the tier held already: nothing written, the start given back
    expect(refusedMeanwhile!.status).toBe(429);
    const counted = await first<{ hits: number }>(w.t.db, sql`select hits from public.rate_limits where key = ${key}`);
    expect(counted?.hits).toBe(CHECKOUTS_PER_DAY - 1);

    // 49 starts made something: the 50th paid checkout is the user's.
    const later = await w.t.http.post('/me/checkout', { cookie: user.cookie, json: { tierId: yPaid.id } });
    expect(later.status, later.text).toBe(200); // a paid checkout: its URL
  });
});
