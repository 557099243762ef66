import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, buyPaidTier, deliverPending, DRAIN_TOKEN, deletedAgentRounds, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * The resume of a restored agent's renewals (functions/billing/deleted-agents.ts) under its claim, against what can
 * happen while it waits on Stripe (found by review 14 of the claim's first version, migration 20261127001800):
 * - a round stalled past its claim's 10 minutes read another round's finished resume as a cancel, and ended a renewal
 *   nobody canceled;
 * - a cancel made meanwhile was put back at Stripe only from the round's memory: one Stripe error or a failed read
 *   after the renewal, and the canceled subscription renewed for good (the cancel now leaves a mark of its own,
 *   agent_resume_canceled_at, which every round puts back at Stripe until it has it; migration 20261127001900);
 * - the agent deleted again while the resume waited: the resume cleared the new ending's mark (a second restore then
 *   renewed nothing) and mailed "is back" for an agent just removed.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld({ env: { DRAIN_TOKEN } });
});
afterAll(() => w.close());

const { drain, del, restore, stoppedThenRestored } = deletedAgentRounds(() => w);

const row = async (stripeSubscriptionId: string) =>
  first<{ cancel_at_period_end: boolean; marked: boolean; claimed: boolean }>(
    w.t.db,
    sql`select cancel_at_period_end, agent_deleted_mailed_at is not null as marked, agent_resume_claimed_at is not null as claimed
          from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`,
  );


describe('a round whose claim lapsed', () => {
  it("attack on the marketplace: another round's finish is not misread as a cancel (nobody canceled; the user was told it renews)", async () => {
    const y = await stoppedThenRestored();
    const start = w.t.clock.now();
    const slow = w.fake.hold(`POST /v1/subscriptions/${y.stripeSubscriptionId}`);
    let roundA: ReturnType<typeof drain> | undefined;
    try {
      roundA = drain();
      await slow.reached; // round A claimed the resume and asked Stripe; Stripe is slow (or A's instance hangs)
      w.t.clock.advance(11 * 60_000); // A's claim lapses
      // round B takes the claim over, as designed, and finishes the resume: mark and claim cleared, user mailed
      expect((await drain()).deletedAgents).toMatchObject({ renewalsResumed: 1, failed: 0 });
    } finally {
      slow.release();
      await roundA?.catch(() => {});
    }
    try {
      await roundA;
      await deliverPending(w);
      const mails = (await mailsTo(w.t, y.user.email)).map((m) => m.subject);
      expect(mails).toContain(`${y.agent.name} is back on Agent Marketplace: your subscription renews again`);
      // Nobody canceled: the user was told it renews, and it must. Round A found mark and claim gone (B's finish)
      // and took that for a cancel made meanwhile: it asked Stripe for cancel_at_period_end=true.
      expect(w.fake.subscriptions.get(y.stripeSubscriptionId)!.cancel_at_period_end).toBe(false);
      expect(await row(y.stripeSubscriptionId)).toMatchObject({ cancel_at_period_end: false });
    } finally {
      w.t.clock.set(start);
    }
  });
});

describe('a cancel made while the round waits on Stripe stands whatever happens to the round', () => {
  /**
   * A restored agent's round asks Stripe to renew (held unanswered); the user cancels meanwhile (200, ending: Stripe
   * still reads the round's earlier ending, so nothing is asked); then `fail` makes the round fail after the renewal,
   * before it could put the cancel back. Stripe back, the next round must put it back from the cancel's own mark.
   */
  async function cancelDuringRenewalThenFail(fail: (y: Awaited<ReturnType<typeof stoppedThenRestored>>, renew: { release(): void }) => Promise<void>) {
    const y = await stoppedThenRestored();
    const renew = w.fake.hold(`POST /v1/subscriptions/${y.stripeSubscriptionId}`);
    try {
      const round = drain();
      await renew.reached;
      const res = await w.t.http.post(`/me/subscriptions/${y.agent.id}/cancel`, { cookie: y.user.cookie });
      expect(res.status, res.text).toBe(200);
      expect(res.body.data).toMatchObject({ cancelAtPeriodEnd: true });
      await fail(y, renew);
      expect((await round).deletedAgents).toMatchObject({ failed: 1 });
    } finally {
      renew.release();
      w.fake.recover();
    }
    await deliverPending(w);
    expect((await drain()).deletedAgents).toEqual({ renewalsStopped: 0, renewalsResumed: 0, failed: 0 });
    await deliverPending(w);
    // The user canceled and was answered 200 with cancelAtPeriodEnd true: Stripe must not renew it.
    expect(w.fake.subscriptions.get(y.stripeSubscriptionId)!.cancel_at_period_end).toBe(true);
    return y;
  }

  it('attack on the buyer: Stripe failing once as the cancel is put back: the next round puts it back', async () => {
    await cancelDuringRenewalThenFail(async (y, renew) => {
      // the renewal is answered; the round's read after it is slow, and meanwhile Stripe starts failing POSTs
      const read = w.fake.hold(`GET /v1/subscriptions/${y.stripeSubscriptionId}`);
      renew.release();
      await read.reached;
      w.fake.outage(`POST /v1/subscriptions/${y.stripeSubscriptionId}`);
      read.release();
    });
  });

  it("attack on the buyer: the round's read after its renewal failing: the next round puts the cancel back", async () => {
    const y = await cancelDuringRenewalThenFail(async (y, renew) => {
      // Stripe renews; its answer to the round's read right after fails (a timeout, a 500)
      w.fake.outage(`GET /v1/subscriptions/${y.stripeSubscriptionId}`);
      renew.release();
    });
    expect(await row(y.stripeSubscriptionId)).toMatchObject({ marked: false, claimed: false });
  });
});

describe('the agent deleted again while a resume is under way', () => {
  it("attack on the marketplace: the second deletion's ending is not taken for the resume's: a second restore renews it again", async () => {
    const y = await stoppedThenRestored();
    const read = w.fake.hold(`GET /v1/subscriptions/${y.stripeSubscriptionId}`);
    let roundA: ReturnType<typeof drain> | undefined;
    try {
      roundA = drain();
      await read.reached; // round A claimed, Stripe renewed it; A's read after it is slow
      await del(y.agent.id); // the admin deletes the agent again
      await deliverPending(w); // the renewal's event: the row is live, not ending
      // round B ends it for the second deletion (the row is still marked from the first: no mail, as designed)
      expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
      expect(w.fake.subscriptions.get(y.stripeSubscriptionId)!.cancel_at_period_end).toBe(true);
    } finally {
      read.release();
    }
    expect((await roundA!).deletedAgents).toMatchObject({ failed: 0 });
    // round A's finish cleared the mark of round B's ending (its claim was still its own)
    await deliverPending(w);
    await restore(y.agent.id); // the deletion is undone again
    await drain();
    await deliverPending(w);
    // "an undone deletion resumes what the rounds stopped": nobody but the rounds ended it, so it must renew again
    expect(w.fake.subscriptions.get(y.stripeSubscriptionId)!.cancel_at_period_end, JSON.stringify(await row(y.stripeSubscriptionId))).toBe(false);
  });

  it('attack on the buyer: no "is back" mail for an agent deleted again before the resume finished', async () => {
    const y = await stoppedThenRestored();
    const renew = w.fake.hold(`POST /v1/subscriptions/${y.stripeSubscriptionId}`);
    let roundA: ReturnType<typeof drain> | undefined;
    try {
      roundA = drain();
      await renew.reached;
      await del(y.agent.id);
    } finally {
      renew.release();
    }
    await roundA;
    await deliverPending(w);
    const subjects = (await mailsTo(w.t, y.user.email)).map((m) => m.subject);
    expect(subjects).not.toContain(`${y.agent.name} is back on Agent Marketplace: your subscription renews again`);
  });
});

/** The agent restored and the round run: the user's own cancel stands at Stripe and here, with no "is back" mail. */
async function expectCancelStandsAfterRestore(agentId: string, user: { cookie: string; email: string }, stripeSubscriptionId: string) {
  await restore(agentId);
  await drain();
  await deliverPending(w);
  const atStripe = w.fake.subscriptions.get(stripeSubscriptionId)!;
  const mine = await w.t.http.get(`/me/subscriptions/${agentId}`, { cookie: user.cookie });
  const backMails = (await mailsTo(w.t, user.email)).filter((m) => m.subject.includes('is back on Agent Marketplace'));
  expect({ endsAtStripe: atStripe.cancel_at_period_end || atStripe.cancel_at !== null, cancelAtPeriodEnd: mine.body.data.cancelAtPeriodEnd, backMails: backMails.length })
    .toEqual({ endsAtStripe: true, cancelAtPeriodEnd: true, backMails: 0 });
}

describe("a user's own renewal in Stripe's portal after the round (review 81)", () => {
  it.each([
    ['flexible billing mode: cancel_at at the period end', 'flexible'],
    ['classic billing mode: cancel_at_period_end', 'classic'],
  ] as const)('then their cancel there again stands when the agent is restored (%s)', async (_label, mode) => {
    // The round's mark stayed through the user's renewal ("don't cancel") and their new cancel, so the restore's resume
    // (cancel_at_period_end: false) undid the user's cancel, billed them a period they had canceled, and mailed "is back".
    const agent = await activeAgent(w);
    const user = await signUp(w.t);
    const bought = await buyPaidTier(w, user, (await paidTier(w, agent.id, { priceCents: 1500 })).id);
    await del(agent.id);
    await drain();
    await deliverPending(w);
    expect(await row(bought.stripeSubscriptionId)).toMatchObject({ cancel_at_period_end: true, marked: true });

    await w.fake.client().subscriptions.update(bought.stripeSubscriptionId, { cancel_at_period_end: false }); // "don't cancel"
    await deliverPending(w);
    expect(await row(bought.stripeSubscriptionId)).toMatchObject({ cancel_at_period_end: false, marked: false });
    if (mode === 'flexible') w.fake.cancelInPortal(bought.stripeSubscriptionId);
    else await w.fake.client().subscriptions.update(bought.stripeSubscriptionId, { cancel_at_period_end: true });
    await deliverPending(w);

    await expectCancelStandsAfterRestore(agent.id, user, bought.stripeSubscriptionId);
  });
});

describe("a user's own renewal while the deleted agent is back, not yet active (review 85)", () => {
  it.each(['draft', 'coming_soon'] as const)('their cancel there again stands when the agent, back as %s, is published', async (status) => {
    // The trigger that drops the round's mark on the user's renewal looked only at 'inactive' agents, and the resume
    // renews only 'active' ones: between the two, the mark stayed and publishing the agent undid the user's cancel.
    const agent = await activeAgent(w);
    const user = await signUp(w.t);
    const bought = await buyPaidTier(w, user, (await paidTier(w, agent.id, { priceCents: 1500 })).id);
    await del(agent.id);
    await drain();
    await deliverPending(w);
    expect(await row(bought.stripeSubscriptionId)).toMatchObject({ cancel_at_period_end: true, marked: true });
    const back = await w.t.http.patch(`/agents/${agent.id}`, { cookie: w.admin.cookie, json: { status } });
    expect(back.status, back.text).toBe(200);
    await drain();

    await w.fake.client().subscriptions.update(bought.stripeSubscriptionId, { cancel_at_period_end: false }); // "don't cancel"
    await deliverPending(w);
    expect(await row(bought.stripeSubscriptionId)).toMatchObject({ cancel_at_period_end: false, marked: false });
    await w.fake.client().subscriptions.update(bought.stripeSubscriptionId, { cancel_at_period_end: true }); // then cancels again
    await deliverPending(w);

    await expectCancelStandsAfterRestore(agent.id, user, bought.stripeSubscriptionId);
  });
});

