import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ABANDONED_AFTER_EXPIRY_MS, CLAIM_TTL_MS } from '../../functions/billing/purchase-claims.ts';
import { UNDO_FAILURES_IN_A_ROW, UNDO_RETRY_MS } from '../../functions/billing/unclaimed-purchases.ts';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp } from '../support/app.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, completeAnonymous, deliver, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * Anonymous purchases nobody claims (functions/billing/unclaimed-purchases.ts). When the buyer's address belongs to an
 * unverified account, the purchase attaches to nobody and the address gets a claim link. Nobody followed it: Stripe
 * went on charging the buyer every period for a subscription no account held, and the buyer had no portal to cancel
 * from. Now the background work (POST /internal/drain) gives the purchase up 7 days after its latest link expired:
 * refunded in full, canceled at Stripe, the address told, the link refused from then on.
 */

const TOKEN = 'drain-token-for-tests-0123456789abcdef';
const PRICE = 2900;
/** From the claim mail to the round that gives the purchase up: the link's week, then the grace week. */
const GIVEN_UP = CLAIM_TTL_MS + ABANDONED_AFTER_EXPIRY_MS;
const DAY = 24 * 60 * 60 * 1000;
/** The Node entry's loop drains this often where no scheduler calls the endpoint (docs/operations.md). */
const NODE_LOOP_MS = 15 * 60_000;
const UNDONE_SUBJECT = 'Your Agent Marketplace purchase was canceled and refunded';
const CLAIM_SUBJECT = 'Confirm your Agent Marketplace purchase';

let w: BillingWorld;
let tier: { id: string };
beforeAll(async () => {
  w = await startBillingWorld({ env: { DRAIN_TOKEN: TOKEN } });
  // One paid tier for every purchase here: its admin's session does not outlive the clock's moves (the housekeeping
  // of a drain weeks ahead prunes it).
  tier = await paidTier(w, (await activeAgent(w)).id, { priceCents: PRICE });
});
afterAll(() => w.close());

const drain = async () => {
  const res = await w.t.http.post('/internal/drain', { bearer: TOKEN });
  expect(res.status, res.text).toBe(200);
  return res.body.data as { purchases: { abandoned: number; undone: number } };
};
const claim = (token: string) => w.t.http.post('/checkout/anonymous/claim', { json: { token } });
const mailsWith = async (email: string, subject: string) => (await mailsTo(w.t, email)).filter((m) => m.subject === subject);
const tokensIn = async (email: string) => (await mailsWith(email, CLAIM_SUBJECT)).map((m) => linkIn(m).searchParams.get('token')!);
const refundsOf = (stripeSubscriptionId: string) =>
  [...w.fake.refunds.values()].filter((r) => r.metadata.stripeSubscriptionId === stripeSubscriptionId);
const stripeStatus = (stripeSubscriptionId: string) => w.fake.subscriptions.get(stripeSubscriptionId)!.status as string;
const localSubscription = (stripeSubscriptionId: string) =>
  first<{ userId: string; status: string }>(
    w.t.db,
    sql`select user_id as "userId", status from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`,
  );

/**
 * A purchase waiting for its claim: an unverified account holds the address (someone signed up with it and never
 * confirmed it), the buyer paid anonymously with it, the success page and the webhook placed it with nobody and the
 * address got the claim link.
 */
async function unclaimedPurchase(label: string) {
  const email = `unclaimed-${label}-${Date.now()}@example.test`;
  const holder = await signUp(w.t, { email, name: 'Holder' });
  const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
  expect(start.status, start.text).toBe(200);
  w.fake.takeEvents();
  const stripeSub = w.fake.completeCheckout(start.body.data.sessionId, { email, name: 'Ann Buyer' });
  const sessionId = start.body.data.sessionId as string;
  expect((await completeAnonymous(w, sessionId)).status).toBe(202);
  await deliver(w, w.fake.takeEvents());
  const [token] = await tokensIn(email);
  return { email, holder, sessionId, stripeSubscriptionId: stripeSub.id as string, token: token! };
}

/** Runs `test` with the app's clock as it moves, and puts the clock back after. */
async function atItsTime(test: () => Promise<void>) {
  const start = w.t.clock.now();
  try {
    await test();
  } finally {
    w.t.clock.set(start);
  }
}

describe('an anonymous purchase nobody claims', () => {
  it('is refunded in full and canceled at Stripe 7 days after its link expired, its address told; the link then answers 422 abandoned', () =>
    atItsTime(async () => {
      const p = await unclaimedPurchase('given-up');
      w.t.clock.advance(GIVEN_UP + 60_000);

      expect((await drain()).purchases).toEqual({ abandoned: 1, undone: 1 });
      expect(stripeStatus(p.stripeSubscriptionId)).toBe('canceled');
      expect(refundsOf(p.stripeSubscriptionId).map((r) => [r.amount, r.metadata.why])).toEqual([[PRICE, 'unclaimed']]);
      const told = await mailsWith(p.email, UNDONE_SUBJECT);
      expect(told).toHaveLength(1);
      expect(told[0]!.text).toContain('refunded in full');
      expect(told[0]!.text).toContain(`${w.t.baseUrl}/sign-in`);
      expect(told[0]!.text).not.toContain('token=');
      // One warn line with the subscription and its refunds; never the address, never the token.
      const lines = w.t.logs.filter((l) => l.msg === 'unclaimed purchase canceled and refunded' && l.stripeSubscriptionId === p.stripeSubscriptionId);
      expect(lines).toEqual([expect.objectContaining({ level: 'warn', refunds: [{ invoiceId: expect.any(String), amount: PRICE }] })]);
      expect(JSON.stringify(lines)).not.toContain(p.email);
      expect(JSON.stringify(w.t.logs)).not.toContain(p.token);

      // The link is refused, saying what became of the purchase; nothing reached the account holding the address.
      const refused = await claim(p.token);
      expect(refused.status).toBe(422);
      expect(refused.body.error).toMatchObject({ code: 'INVALID_STATE', details: { reason: 'abandoned' } });
      expect(refused.body.error.message).toContain('canceled and refunded');
      expect(await localSubscription(p.stripeSubscriptionId)).toBeUndefined();
      const holder = await first<{ verified: boolean; subscriptions: number; customers: number }>(
        w.t.db,
        sql`select u."emailVerified" as verified,
                   (select count(*)::int from subscriptions s where s.user_id = u.id) as subscriptions,
                   (select count(*)::int from billing_customers c where c.user_id = u.id) as customers
              from "user" u where u.id = ${p.holder.userId}`,
      );
      expect(holder).toEqual({ verified: false, subscriptions: 0, customers: 0 });

      // Back on the success page: no new link for a purchase that is gone, and the same answer.
      const again = await completeAnonymous(w, p.sessionId);
      expect(again.status).toBe(422);
      expect(again.body.error).toMatchObject({ code: 'INVALID_STATE', details: { reason: 'abandoned' } });
      expect(await tokensIn(p.email)).toEqual([p.token]);

      // Stripe's events about the cancel write nothing; a second round changes nothing: no second refund, no second mail.
      await deliver(w, w.fake.takeEvents());
      expect(await localSubscription(p.stripeSubscriptionId)).toBeUndefined();
      expect((await drain()).purchases).toEqual({ abandoned: 0, undone: 0 });
      expect(refundsOf(p.stripeSubscriptionId)).toHaveLength(1);
      expect(await mailsWith(p.email, UNDONE_SUBJECT)).toHaveLength(1);
    }));

  it('is left alone within the grace, counted from its latest link; that link still works', () =>
    atItsTime(async () => {
      const p = await unclaimedPurchase('in-grace');
      // A minute short of the grace: the link expired almost a week ago.
      w.t.clock.advance(GIVEN_UP - 60_000);
      expect((await drain()).purchases).toEqual({ abandoned: 0, undone: 0 });
      expect(stripeStatus(p.stripeSubscriptionId)).toBe('active');
      expect(refundsOf(p.stripeSubscriptionId)).toEqual([]);
      expect((await claim(p.token)).body.error).toMatchObject({ details: { reason: 'expired' } });

      // The buyer is back on the success page: a new link, whose expiry the grace now counts from.
      expect((await completeAnonymous(w, p.sessionId)).status).toBe(202);
      const fresh = (await tokensIn(p.email)).find((t) => t !== p.token)!;
      w.t.clock.advance(2 * DAY);
      expect((await drain()).purchases).toEqual({ abandoned: 0, undone: 0 });

      const res = await claim(fresh);
      expect(res.status, res.text).toBe(200);
      expect(res.body.data.subscription).toMatchObject({ userId: p.holder.userId, status: 'active' });
      expect(refundsOf(p.stripeSubscriptionId)).toEqual([]);
      expect(await mailsWith(p.email, UNDONE_SUBJECT)).toEqual([]);
    }));

  it('a claimed purchase is never touched, however late', () =>
    atItsTime(async () => {
      const p = await unclaimedPurchase('claimed');
      expect((await claim(p.token)).status).toBe(200);
      w.t.clock.advance(3 * GIVEN_UP);
      expect((await drain()).purchases).toEqual({ abandoned: 0, undone: 0 });
      expect(stripeStatus(p.stripeSubscriptionId)).toBe('active');
      expect(refundsOf(p.stripeSubscriptionId)).toEqual([]);
      expect(await localSubscription(p.stripeSubscriptionId)).toMatchObject({ userId: p.holder.userId, status: 'active' });
      expect(await mailsWith(p.email, UNDONE_SUBJECT)).toEqual([]);
    }));

  it('when Stripe fails during the undo, the link is refused already and a later round finishes: one refund, one mail', () =>
    atItsTime(async () => {
      const p = await unclaimedPurchase('outage');
      w.t.clock.advance(GIVEN_UP + 60_000);
      // the refund goes through, the cancel does not
      w.fake.outage(`DELETE /v1/subscriptions/${p.stripeSubscriptionId}`);
      try {
        expect((await drain()).purchases).toEqual({ abandoned: 1, undone: 0 });
      } finally {
        w.fake.recover();
      }
      expect(stripeStatus(p.stripeSubscriptionId)).toBe('active');
      expect(refundsOf(p.stripeSubscriptionId)).toHaveLength(1);
      expect(await mailsWith(p.email, UNDONE_SUBJECT)).toEqual([]);
      expect(w.t.logs.some((l) => l.msg === 'could not undo an unclaimed purchase; a later round retries' && l.stripeSubscriptionId === p.stripeSubscriptionId)).toBe(true);
      expect((await claim(p.token)).body.error).toMatchObject({ code: 'INVALID_STATE', details: { reason: 'abandoned' } });

      // It waits UNDO_RETRY_MS (behind every claim not yet tried), then the next round finishes it.
      expect((await drain()).purchases).toEqual({ abandoned: 0, undone: 0 });
      w.t.clock.advance(UNDO_RETRY_MS);
      expect((await drain()).purchases).toEqual({ abandoned: 0, undone: 1 });
      expect(stripeStatus(p.stripeSubscriptionId)).toBe('canceled');
      expect(refundsOf(p.stripeSubscriptionId)).toHaveLength(1);
      expect(await mailsWith(p.email, UNDONE_SUBJECT)).toHaveLength(1);
      expect((await drain()).purchases).toEqual({ abandoned: 0, undone: 0 });
    }));

  it('one Stripe no longer knows is given up with nothing to refund and nobody told', () =>
    atItsTime(async () => {
      const p = await unclaimedPurchase('unknown');
      w.fake.subscriptions.delete(p.stripeSubscriptionId); // another Stripe account, deleted test data
      w.t.clock.advance(GIVEN_UP + 60_000);
      expect((await drain()).purchases).toEqual({ abandoned: 1, undone: 1 });
      expect(await mailsWith(p.email, UNDONE_SUBJECT)).toEqual([]);
      expect((await claim(p.token)).body.error).toMatchObject({ details: { reason: 'abandoned' } });
      expect((await drain()).purchases).toEqual({ abandoned: 0, undone: 0 });
    }));

  it('concurrent rounds undo each purchase once: one refund and one mail each', () =>
    atItsTime(async () => {
      const purchases = [await unclaimedPurchase('many-a'), await unclaimedPurchase('many-b'), await unclaimedPurchase('many-c')];
      w.t.clock.advance(GIVEN_UP + 60_000);
      const rounds = await Promise.all(Array.from({ length: 4 }, () => drain()));
      const total = (key: 'abandoned' | 'undone') => rounds.reduce((n, r) => n + r.purchases[key], 0);
      expect([total('abandoned'), total('undone')]).toEqual([3, 3]);
      for (const p of purchases) {
        expect(stripeStatus(p.stripeSubscriptionId)).toBe('canceled');
        expect(refundsOf(p.stripeSubscriptionId)).toHaveLength(1);
        expect(await mailsWith(p.email, UNDONE_SUBJECT)).toHaveLength(1);
      }
    }));
});

/** Stripe refuses the cancel of these subscriptions for good (a 4xx, not an outage that ends) until `recover()`. */
const refuseCancelOf = (stripeSubscriptionIds: string[]) => {
  for (const id of stripeSubscriptionIds) w.fake.outage(`DELETE /v1/subscriptions/${id}`, { status: 400, type: 'invalid_request_error' });
};
/** Undone in the end: canceled, refunded once, its address told once. */
async function expectUndoneOnce(p: { email: string; stripeSubscriptionId: string }) {
  expect(stripeStatus(p.stripeSubscriptionId)).toBe('canceled');
  expect(refundsOf(p.stripeSubscriptionId)).toHaveLength(1);
  expect(await mailsWith(p.email, UNDONE_SUBJECT)).toHaveLength(1);
}

describe('an unclaimed purchase Stripe keeps refusing', () => {
  // Found by a review: rounds took the oldest claim first and stopped at the first failure, and the failed claim was
  // due again a minute later; so every round a minute or more after the last (the Node loop every 15 minutes, a cron
  // every minute) took the stuck purchase first again and stopped. The purchases behind it were never undone: Stripe
  // went on charging their buyers every period for subscriptions no account held. A disputed first charge, whose
  // refund Stripe refuses (`charge_disputed`), is enough to get there; here Stripe refuses the stuck one's cancel.
  it('attack: holds back the undo of no later unclaimed purchase, round after round; it is finished once Stripe accepts', () =>
    atItsTime(async () => {
      const stuck = await unclaimedPurchase('stuck');
      w.t.clock.advance(60_000); // its link is a minute older
      const behind = await unclaimedPurchase('behind');
      w.t.clock.advance(GIVEN_UP + 60_000);

      refuseCancelOf([stuck.stripeSubscriptionId]);
      try {
        // the round goes on past the failure: the purchase behind it is undone in the same round
        expect((await drain()).purchases).toEqual({ abandoned: 2, undone: 1 });
        for (let round = 1; round < 4; round++) {
          w.t.clock.advance(NODE_LOOP_MS);
          await drain();
        }
      } finally {
        w.fake.recover();
      }
      await expectUndoneOnce(behind);
      expect(stripeStatus(stuck.stripeSubscriptionId)).toBe('active');
      expect(await mailsWith(stuck.email, UNDONE_SUBJECT)).toEqual([]);

      w.t.clock.advance(UNDO_RETRY_MS);
      expect((await drain()).purchases).toEqual({ abandoned: 0, undone: 1 });
      await expectUndoneOnce(stuck);
      await expectUndoneOnce(behind);
    }));

  it('goes behind every claim not yet tried: a round stopped by failures in a row takes the others first next time', () =>
    atItsTime(async () => {
      const stuck = [];
      for (let n = 0; n < UNDO_FAILURES_IN_A_ROW; n++) {
        stuck.push(await unclaimedPurchase(`stuck-${n}`));
        w.t.clock.advance(60_000);
      }
      const behind = await unclaimedPurchase('behind-many');
      w.t.clock.advance(GIVEN_UP + 60_000);

      refuseCancelOf(stuck.map((p) => p.stripeSubscriptionId));
      try {
        // failures in a row: Stripe is likely failing for all, so the round stops before the last purchase
        expect((await drain()).purchases).toEqual({ abandoned: UNDO_FAILURES_IN_A_ROW, undone: 0 });
        // when the failed ones are due again, the one not yet tried comes first, although its link is the newest
        w.t.clock.advance(UNDO_RETRY_MS);
        expect((await drain()).purchases).toEqual({ abandoned: 1, undone: 1 });
      } finally {
        w.fake.recover();
      }
      await expectUndoneOnce(behind);

      w.t.clock.advance(UNDO_RETRY_MS);
      expect((await drain()).purchases).toEqual({ abandoned: 0, undone: UNDO_FAILURES_IN_A_ROW });
      for (const p of [...stuck, behind]) await expectUndoneOnce(p);
    }));

  it('a refund Stripe refuses (a disputed charge) still cancels the subscription; the refund is retried later, one mail', () =>
    atItsTime(async () => {
      const p = await unclaimedPurchase('disputed');
      w.t.clock.advance(GIVEN_UP + 60_000);
      w.fake.outage('POST /v1/refunds', { status: 400, type: 'invalid_request_error', code: 'charge_disputed' });
      try {
        expect((await drain()).purchases).toEqual({ abandoned: 1, undone: 0 });
      } finally {
        w.fake.recover();
      }
      // no further period is charged while the refund waits; nothing told yet, the link refused already
      expect(stripeStatus(p.stripeSubscriptionId)).toBe('canceled');
      expect(refundsOf(p.stripeSubscriptionId)).toEqual([]);
      expect(await mailsWith(p.email, UNDONE_SUBJECT)).toEqual([]);
      expect((await claim(p.token)).body.error).toMatchObject({ code: 'INVALID_STATE', details: { reason: 'abandoned' } });
      // an operator sees the refusal, with Stripe's code; never the address or the token
      const lines = w.t.logs.filter(
        (l) => l.msg === 'stripe refused a refund; the subscription is canceled all the same' && l.stripeSubscriptionId === p.stripeSubscriptionId,
      );
      expect(lines).toEqual([expect.objectContaining({ level: 'warn', code: 'charge_disputed', invoiceId: expect.any(String) })]);
      expect(JSON.stringify(lines)).not.toContain(p.email);
      expect(JSON.stringify(w.t.logs)).not.toContain(p.token);

      // Stripe's events about the cancel write nothing for anyone
      await deliver(w, w.fake.takeEvents());
      expect(await localSubscription(p.stripeSubscriptionId)).toBeUndefined();

      expect((await drain()).purchases).toEqual({ abandoned: 0, undone: 0 });
      w.t.clock.advance(UNDO_RETRY_MS);
      expect((await drain()).purchases).toEqual({ abandoned: 0, undone: 1 });
      expect(refundsOf(p.stripeSubscriptionId).map((r) => r.amount)).toEqual([PRICE]);
      await expectUndoneOnce(p);
    }));
});

describe('without payments configured', () => {
  it('the step does nothing and the round still works', async () => {
    const bare = await startTestApp({ env: { DRAIN_TOKEN: TOKEN } });
    try {
      // A claim long given up by the rule, left by a deployment that had Stripe configured.
      await sql`insert into purchase_claims (token_hash, email, stripe_subscription_id, stripe_customer_id, expires_at)
                values ('not-a-token-hash', 'left-behind@example.test', 'sub_left_behind', 'cus_left_behind',
                        ${new Date(bare.clock.now().getTime() - 30 * DAY)})`.execute(bare.db);
      const res = await bare.http.post('/internal/drain', { bearer: TOKEN });
      expect(res.status, res.text).toBe(200);
      expect(res.body.data.purchases).toEqual({ abandoned: 0, undone: 0 });
      const row = await first<{ abandonedAt: Date | null }>(bare.db, sql`select abandoned_at as "abandonedAt" from purchase_claims`);
      expect(row).toEqual({ abandonedAt: null });
    } finally {
      await bare.close();
    }
  });
});
