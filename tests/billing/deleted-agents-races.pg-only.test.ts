import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { eventually, holdOpen, statementsWaitingForLock } from '../support/databases.ts';
import { mailsTo } from '../support/mail.ts';
import type { CallResult } from '../support/http.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, buyPaidTier, deliverPending, paidTier, DRAIN_TOKEN, deletedAgentRounds, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A restored agent's round (functions/billing/deleted-agents.ts) renews again at Stripe what an earlier round stopped,
 * while the subscriber, told their subscription will not renew, may cancel it themselves. Their cancel must stand
 * whenever it comes (found by review 10: the round picked its rows, the cancel answered 200 and dropped the round's
 * mark, and the round then asked Stripe to renew anyway). The interleavings are made exact with a row held by a
 * connection of the test's own and a Stripe call the fake holds unanswered: PostgreSQL only.
 */
let w: BillingWorld;
let locker: postgres.Sql;
beforeAll(async () => {
  w = await startBillingWorld({ env: { DRAIN_TOKEN } });
  locker = postgres(w.t.databaseUrl!, { max: 1, onnotice: () => {} });
});
afterAll(async () => {
  await locker?.end({ timeout: 1 });
  await w?.close();
});

const { drain, del, stoppedThenRestored } = deletedAgentRounds(() => w);

const ending = async (stripeSubscriptionId: string) =>
  first<{ cancel_at_period_end: boolean }>(w.t.db, sql`select cancel_at_period_end from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`);


describe('a user cancels while the resume round is under way (found by review 10)', () => {
  it('attack on the buyer: a cancel between the round\'s search and its call to Stripe stands; Stripe does not renew', async () => {
    const y = await stoppedThenRestored();
    // another deleted agent's subscription, which the round ends before it resumes: held, it pauses the round there
    const agentX = await activeAgent(w);
    const x = await buyPaidTier(w, await signUp(w.t), (await paidTier(w, agentX.id, { priceCents: 900 })).id);
    await del(agentX.id);

    const held = await holdOpen(locker, (tx) => tx`select 1 from subscriptions where id = ${x.subscriptionId} for update`);
    let round: Promise<unknown> | undefined;
    try {
      round = drain();
      await eventually('the round is past its search', async () => (await statementsWaitingForLock(w.t.db, '%as marked%')) >= 1);
      const canceled = await w.t.http.post(`/me/subscriptions/${y.agent.id}/cancel`, { cookie: y.user.cookie });
      expect(canceled.status, canceled.text).toBe(200);
      expect(canceled.body.data).toMatchObject({ cancelAtPeriodEnd: true });
    } finally {
      await held.release();
    }
    expect(await round).toMatchObject({ deletedAgents: { renewalsResumed: 0, failed: 0 } });
    await deliverPending(w);
    expect(w.fake.subscriptions.get(y.stripeSubscriptionId)!.cancel_at_period_end).toBe(true);
    expect(await ending(y.stripeSubscriptionId)).toEqual({ cancel_at_period_end: true });
    expect((await mailsTo(w.t, y.user.email)).map((m) => m.subject)).not.toContain(
      `${y.agent.name} is back on Agent Marketplace: your subscription renews again`,
    );
  });

  it('attack on the buyer: a cancel made while Stripe answers the round\'s renewal stands: the round puts it back after its own call', async () => {
    // (A first mend held the row's lock while Stripe answered, so the cancel waited; review 13 found that lock stalled
    // the subscriber's usage calls, and every request on the embedded database. The cancel no longer waits: it
    // clears the round's claim, and the round, finding it cleared, asks Stripe for the cancel again.)
    const y = await stoppedThenRestored();
    const stripeCall = w.fake.hold(`POST /v1/subscriptions/${y.stripeSubscriptionId}`);
    let round: Promise<unknown> | undefined;
    try {
      round = drain();
      await stripeCall.reached; // the round asked Stripe to renew; no answer yet
      const res = await w.t.http.post(`/me/subscriptions/${y.agent.id}/cancel`, { cookie: y.user.cookie });
      expect(res.status, res.text).toBe(200);
      expect(res.body.data).toMatchObject({ cancelAtPeriodEnd: true });
    } finally {
      stripeCall.release();
    }
    expect(await round).toMatchObject({ deletedAgents: { renewalsResumed: 0, failed: 0 } });
    await deliverPending(w);
    expect(w.fake.subscriptions.get(y.stripeSubscriptionId)!.cancel_at_period_end).toBe(true);
    expect(await ending(y.stripeSubscriptionId)).toEqual({ cancel_at_period_end: true });
    expect((await mailsTo(w.t, y.user.email)).filter((m) => m.subject.includes('is back on Agent Marketplace'))).toEqual([]);
    expect((await drain()).deletedAgents).toEqual({ renewalsStopped: 0, renewalsResumed: 0, failed: 0 });
  });

  // Found by review 13: the cancel judged whether to ask Stripe from the row it read at its start; a resume finishing
  // between that read and the cancel's mark drop left it a stale "ending" and no mark, so it asked Stripe nothing,
  // answered 200, and the subscription renewed. The pause is forced by holding the key of the cancel's allowance,
  // which it takes between the two. Now the cancel reads Stripe after dropping the mark.
  it('attack on the buyer: a resume that finishes while the cancel is under way does not leave it unasked at Stripe', async () => {
    const { agent, user, ...bought } = await stoppedThenRestored();
    // hold the key of the user's cancel allowance: the cancel has read its row (ending, marked) and waits there
    const key = `billing-cancel|${user.userId}|own`;
    const held = await holdOpen(
      locker,
      (tx) => tx`insert into rate_limits (key, window_start, window_end, hits) values (${key}, now(), now() + interval '1 day', 0)`,
    );
    let canceled: Promise<CallResult> | undefined;
    try {
      canceled = w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: user.cookie });
      await eventually('the cancel waits in its allowance', async () => (await statementsWaitingForLock(w.t.db, '%rate_limit_hit%')) >= 1);
      // the round resumes the renewal entirely meanwhile
      expect((await drain()).deletedAgents).toMatchObject({ renewalsResumed: 1, failed: 0 });
    } finally {
      await held.release();
    }
    const res = await canceled!;
    expect(res.status, res.text).toBe(200);
    await deliverPending(w);
    // The user asked to cancel and was answered 200: Stripe must not renew it.
    expect(w.fake.subscriptions.get(bought.stripeSubscriptionId)!.cancel_at_period_end, JSON.stringify(res.body.data)).toBe(true);
    expect(
      await first<{ cancel_at_period_end: boolean }>(w.t.db, sql`select cancel_at_period_end from subscriptions where stripe_subscription_id = ${bought.stripeSubscriptionId}`),
    ).toEqual({ cancel_at_period_end: true });
  });
});
