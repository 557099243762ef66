import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ABANDONED_AFTER_EXPIRY_MS, CLAIM_TTL_MS } from '../../functions/billing/purchase-claims.ts';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import type { CallResult } from '../support/http.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, deliver, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A claim of an anonymous purchase and the background work giving the same purchase up (unclaimed-purchases.ts) end in
 * exactly one of the two: claimed and not refunded, or refunded and the claim refused; never a purchase both served
 * and refunded. Both decide under the claim row's lock: the claim in billing_claim_purchase (migration
 * 20261126001800), the round in its FOR UPDATE SKIP LOCKED.
 *
 * The claimant's instance and the round's are two instances on one database whose clocks disagree: to the claimant the
 * link is still valid, to the round the purchase is past its grace. Each interleaving is made exact with a lock held
 * on a connection of the test's own, so PostgreSQL only. The same holds for the success page renewing an expired link
 * while the purchase is given up: no new link goes out for a purchase that is refunded.
 */

const TOKEN = 'drain-token-for-tests-0123456789abcdef';
const UNDONE_SUBJECT = 'Your Agent Marketplace purchase was canceled and refunded';

let w: BillingWorld;
/** The instance that runs the background work, two weeks and a minute after the claim links were mailed. */
let later: TestApp;
let locker: postgres.Sql;
let tier: { id: string };

beforeAll(async () => {
  w = await startBillingWorld({ env: { DRAIN_TOKEN: TOKEN } });
  later = await startTestApp({
    testDatabase: { database: w.t.database, url: w.t.databaseUrl, drop: async () => {} },
    env: { ...w.fake.env(), DRAIN_TOKEN: TOKEN },
    now: new Date(w.t.clock.now().getTime() + CLAIM_TTL_MS + ABANDONED_AFTER_EXPIRY_MS + 60_000),
  });
  locker = postgres(w.t.databaseUrl!, { max: 1, onnotice: () => {} });
  tier = await paidTier(w, (await activeAgent(w)).id, { priceCents: 3300 });
});
afterAll(async () => {
  await locker?.end({ timeout: 1 });
  await later?.close();
  await w?.close();
});

const claim = (token: string) => w.t.http.post('/checkout/anonymous/claim', { json: { token } });
const roundOnLater = async () => {
  const res = await later.http.post('/internal/drain', { bearer: TOKEN });
  expect(res.status, res.text).toBe(200);
  return res.body.data.purchases as { abandoned: number; undone: number };
};
const refundsOf = (stripeSubscriptionId: string) =>
  [...w.fake.refunds.values()].filter((r) => r.metadata.stripeSubscriptionId === stripeSubscriptionId);
const undoneMails = async (email: string) => (await mailsTo(w.t, email)).filter((m) => m.subject === UNDONE_SUBJECT);

/** An unverified account holds the address; the buyer paid anonymously with it and the address got the claim link. */
async function unclaimedPurchase(label: string) {
  const email = `race-${label}-${Date.now()}@example.test`;
  const holder = await signUp(w.t, { email, name: 'Holder' });
  const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
  w.fake.takeEvents();
  const stripeSub = w.fake.completeCheckout(start.body.data.sessionId, { email, name: 'Ann Buyer' });
  expect((await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId: start.body.data.sessionId } })).status).toBe(202);
  await deliver(w, w.fake.takeEvents());
  const mail = (await mailsTo(w.t, email)).find((m) => m.subject === 'Confirm your Agent Marketplace purchase')!;
  return {
    email,
    holder,
    sessionId: start.body.data.sessionId as string,
    stripeSubscriptionId: stripeSub.id as string,
    token: linkIn(mail).searchParams.get('token')!,
  };
}

/** Exactly one outcome: claimed (served, nothing refunded, nobody told) or given up (refunded, canceled, told once). */
async function expectOneOutcome(p: Awaited<ReturnType<typeof unclaimedPurchase>>, res: CallResult) {
  const served = await first<{ n: number }>(
    w.t.db,
    sql`select count(*)::int as n from subscriptions where stripe_subscription_id = ${p.stripeSubscriptionId} and status = 'active'`,
  );
  if (res.status === 200) {
    expect(served!.n).toBe(1);
    expect(refundsOf(p.stripeSubscriptionId)).toEqual([]);
    expect(w.fake.subscriptions.get(p.stripeSubscriptionId)!.status).toBe('active');
    expect(await undoneMails(p.email)).toEqual([]);
  } else {
    expect(res.status, res.text).toBe(422);
    expect(res.body.error).toMatchObject({ code: 'INVALID_STATE', details: { reason: 'abandoned' } });
    expect(served!.n).toBe(0);
    expect(refundsOf(p.stripeSubscriptionId)).toHaveLength(1);
    expect(w.fake.subscriptions.get(p.stripeSubscriptionId)!.status).toBe('canceled');
    expect(await undoneMails(p.email)).toHaveLength(1);
  }
  // and no later round changes it
  expect(await roundOnLater()).toEqual({ abandoned: 0, undone: 0 });
  expect(refundsOf(p.stripeSubscriptionId)).toHaveLength(res.status === 200 ? 0 : 1);
}

describe('a claim and the abandonment of one purchase at once', () => {
  it('the abandonment lands between the claim\'s first look and its write: the claim is refused, the purchase refunded once', async () => {
    const p = await unclaimedPurchase('abandon-first');
    // The claim finds its link valid, then waits where it numbers its read of Stripe (an ALTER SEQUENCE holds the
    // sequence), before billing_claim_purchase: the round meets no lock of the claim's.
    const held = await holdOpen(locker, (tx) => tx`alter sequence public.stripe_reads increment by 1`);
    let claimed: Promise<CallResult> | undefined;
    try {
      claimed = claim(p.token);
      await eventually('the claim waits', async () => (await statementsWaitingForLock(w.t.db, '%stripe_reads%')) > 0);
      expect(await roundOnLater()).toEqual({ abandoned: 1, undone: 1 });
    } finally {
      await held.release();
    }
    const res = await claimed!;
    expect(res.status, res.text).toBe(422);
    await expectOneOutcome(p, res);
    // the account holding the address was not touched either: still unverified
    const holder = await first<{ verified: boolean }>(w.t.db, sql`select "emailVerified" as verified from "user" where id = ${p.holder.userId}`);
    expect(holder).toEqual({ verified: false });
  });

  it('the claim holds the claim row: the round passes it over, the claim goes through, and no round refunds it', async () => {
    const p = await unclaimedPurchase('claim-first');
    // The claim takes the claim row, then waits for the account's credential row, which the test holds.
    const held = await holdOpen(locker, (tx) => tx`select 1 from account where "userId" = ${p.holder.userId} and "providerId" = 'credential' for update`);
    let claimed: Promise<CallResult> | undefined;
    try {
      claimed = claim(p.token);
      await eventually('the claim waits', async () => (await statementsWaitingForLock(w.t.db, '%billing_claim_purchase%')) > 0);
      expect(await roundOnLater()).toEqual({ abandoned: 0, undone: 0 });
    } finally {
      await held.release();
    }
    const res = await claimed!;
    expect(res.status, res.text).toBe(200);
    expect(res.body.data.subscription).toMatchObject({ userId: p.holder.userId, status: 'active' });
    await expectOneOutcome(p, res);
  });

  it('the buyer back on the success page while the purchase is given up: no new link is mailed for it', async () => {
    const p = await unclaimedPurchase('renewal');
    const claimRow = () =>
      first<{ tokenHash: string; abandoned: boolean }>(
        w.t.db,
        sql`select token_hash as "tokenHash", abandoned_at is not null as abandoned from purchase_claims where stripe_subscription_id = ${p.stripeSubscriptionId}`,
      );
    const before = await claimRow();
    // The completion finds the claim pending, then waits where it names the purchase for the mail (the tiers table
    // held), before it renews the link; meanwhile the round gives the purchase up, and waits there too for its own mail.
    const held = await holdOpen(locker, (tx) => tx`lock table public.tiers in access exclusive mode`);
    let completed: Promise<CallResult> | undefined;
    let round: Promise<{ abandoned: number; undone: number }> | undefined;
    try {
      w.t.clock.advance(CLAIM_TTL_MS + 60_000); // the link expired: the success page would renew it
      completed = w.t.http.post('/checkout/anonymous/complete', { json: { sessionId: p.sessionId } });
      await eventually('the completion waits', async () => (await statementsWaitingForLock(w.t.db, '%public.tiers%')) > 0);
      round = roundOnLater();
      await eventually('the round gave the purchase up', async () => (await claimRow())!.abandoned);
    } finally {
      await held.release();
      w.t.clock.advance(-(CLAIM_TTL_MS + 60_000));
    }
    expect(await round!).toEqual({ abandoned: 1, undone: 1 });
    const res = await completed!;
    expect([202, 422]).toContain(res.status);
    // the link was not renewed: the only link the address ever got is the first, and it is refused
    expect((await claimRow())!.tokenHash).toBe(before!.tokenHash);
    expect((await mailsTo(w.t, p.email)).filter((m) => m.subject === 'Confirm your Agent Marketplace purchase')).toHaveLength(1);
    expect((await claim(p.token)).body.error).toMatchObject({ details: { reason: 'abandoned' } });
    expect(await undoneMails(p.email)).toHaveLength(1);
  });

  it('racing freely, each purchase ends claimed or refunded, never both', async () => {
    for (let round = 0; round < 4; round++) {
      const p = await unclaimedPurchase(`free-${round}`);
      const [res] = await Promise.all([claim(p.token), roundOnLater()]);
      await expectOneOutcome(p, res);
    }
  });
});
