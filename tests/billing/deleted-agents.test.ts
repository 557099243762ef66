import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { mailsTo } from '../support/mail.ts';
import { meter, reqId, setQuota, usagePath } from '../metering/support.ts';
import { accessTokenFor } from '../support/oauth.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, buyPaidTier, deliver, deliverPending, paidTier, DRAIN_TOKEN, deletedAgentRounds, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * An agent deleted by an admin (DELETE /agents/{agentId}: status inactive) can no longer be used: its OAuth client is
 * disabled and its tokens revoked. Its paid subscriptions were left as they were, so Stripe charged their users every
 * period for it (found by review 06). Now the background work (POST /internal/drain, the Node entry's billing loop)
 * sets each to cancel at period end at Stripe and mails its user once (functions/billing/deleted-agents.ts).
 */
const SUBJECT = (agent: string) => `${agent} was removed from Agent Marketplace: your subscription will not renew`;

let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld({ env: { DRAIN_TOKEN } });
});
afterAll(() => w.close());

const { drain, del, restore } = deletedAgentRounds(() => w);

const paidInvoicesOf = (stripeSubscriptionId: string) =>
  [...w.fake.invoices.values()].filter((i) => i.parent?.subscription_details?.subscription === stripeSubscriptionId && i.status === 'paid');

/** A paid subscriber of a new agent: the agent, the user, and the subscription's ids. */
async function subscriber(priceCents = 1500) {
  const agent = await activeAgent(w);
  const user = await signUp(w.t);
  const bought = await buyPaidTier(w, user, (await paidTier(w, agent.id, { priceCents })).id);
  return { agent, user, ...bought };
}
/** Makes the renewal's payment fail: the subscription is past_due at Stripe and here, its renewal invoice open. */
async function failRenewal(stripeSubscriptionId: string): Promise<string> {
  w.fake.setPaymentMode('fails');
  w.fake.advancePeriod(stripeSubscriptionId);
  w.fake.setPaymentMode('succeeds');
  await deliverPending(w);
  return w.fake.subscriptions.get(stripeSubscriptionId)!.latest_invoice as string;
}
const removalMails = async (email: string, agentName: string) => (await mailsTo(w.t, email)).filter((m) => m.subject === SUBJECT(agentName));

describe('an agent deleted while users pay for it', () => {
  it('attack on the buyer: its subscriptions stop renewing (no charge for the next period) and each user is told once', async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 4900 });
    const user = await signUp(w.t);
    const { stripeSubscriptionId } = await buyPaidTier(w, user, tier.id);
    // another agent's subscriber, whose agent stays, is left alone
    const kept = await activeAgent(w);
    const keptUser = await signUp(w.t);
    const keptSub = await buyPaidTier(w, keptUser, (await paidTier(w, kept.id, { priceCents: 900 })).id);

    expect((await w.t.http.delete(`/agents/${agent.id}`, { cookie: w.admin.cookie })).status).toBe(200);
    // two rounds at once (two instances): both may reach Stripe (the cancel is idempotent), the user is mailed once
    const rounds = await Promise.all([drain(), drain()]);
    expect(rounds.map((r) => r.deletedAgents.failed)).toEqual([0, 0]);
    expect(rounds[0]!.deletedAgents.renewalsStopped + rounds[1]!.deletedAgents.renewalsStopped).toBeGreaterThanOrEqual(1);
    await deliverPending(w);

    expect(w.fake.subscriptions.get(stripeSubscriptionId)!.cancel_at_period_end).toBe(true);
    expect(w.fake.subscriptions.get(keptSub.stripeSubscriptionId)!.cancel_at_period_end).toBe(false);
    // the user sees the subscription end at its period's end: paid for, kept until then
    const mine = await w.t.http.get('/me/subscriptions', { cookie: user.cookie });
    expect(mine.body.data.items ?? mine.body.data).toEqual(
      expect.arrayContaining([expect.objectContaining({ agentId: agent.id, status: 'active', cancelAtPeriodEnd: true })]),
    );
    const mails = (await mailsTo(w.t, user.email)).filter((m) => m.subject === SUBJECT(agent.name));
    expect(mails).toHaveLength(1);
    expect(mails[0]!.text).toContain('nothing more will be charged');

    // a second round finds nothing to do and mails nobody again
    expect((await drain()).deletedAgents).toEqual({ renewalsStopped: 0, renewalsResumed: 0, failed: 0 });
    expect((await mailsTo(w.t, user.email)).filter((m) => m.subject === SUBJECT(agent.name))).toHaveLength(1);

    // the period turns at Stripe: the subscription ends, no second invoice
    w.fake.advancePeriod(stripeSubscriptionId);
    await deliverPending(w);
    expect(paidInvoicesOf(stripeSubscriptionId)).toHaveLength(1);
    expect(await first(w.t.db, sql`select status from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`)).toEqual({
      status: 'canceled',
    });
    expect(w.fake.subscriptions.get(keptSub.stripeSubscriptionId)!.cancel_at_period_end).toBe(false);
  });

  it('an agent made active again before a round keeps its subscriptions renewing', async () => {
    const agent = await activeAgent(w);
    const user = await signUp(w.t);
    const { stripeSubscriptionId } = await buyPaidTier(w, user, (await paidTier(w, agent.id, { priceCents: 1500 })).id);
    expect((await w.t.http.delete(`/agents/${agent.id}`, { cookie: w.admin.cookie })).status).toBe(200);
    const back = await w.t.http.patch(`/agents/${agent.id}`, { cookie: w.admin.cookie, json: { status: 'active' } });
    expect(back.status, back.text).toBe(200);
    expect((await drain()).deletedAgents.renewalsStopped).toBe(0);
    expect(w.fake.subscriptions.get(stripeSubscriptionId)!.cancel_at_period_end).toBe(false);
  });

  it('a deletion undone after a round gets the renewals back: each renews again at Stripe, its user told once (found by review 08)', async () => {
    // A mistaken deletion ended every subscriber's renewal for good, and a user could not even buy again while the
    // ending subscription was live (checkout refuses a second paid subscription to an agent).
    const agent = await activeAgent(w);
    const user = await signUp(w.t);
    const { stripeSubscriptionId } = await buyPaidTier(w, user, (await paidTier(w, agent.id, { priceCents: 1500 })).id);
    // a subscriber who had chosen to leave before the deletion stays leaving
    const leaver = await signUp(w.t);
    const leaving = await buyPaidTier(w, leaver, (await paidTier(w, agent.id, { priceCents: 1600 })).id);
    expect((await w.t.http.post(`/me/subscriptions/${agent.id}/cancel`, { cookie: leaver.cookie })).status).toBe(200);

    expect((await w.t.http.delete(`/agents/${agent.id}`, { cookie: w.admin.cookie })).status).toBe(200);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
    expect(w.fake.subscriptions.get(stripeSubscriptionId)!.cancel_at_period_end).toBe(true);

    expect((await w.t.http.patch(`/agents/${agent.id}`, { cookie: w.admin.cookie, json: { status: 'active' } })).status).toBe(200);
    const rounds = await Promise.all([drain(), drain()]);
    expect(rounds.map((r) => r.deletedAgents.failed)).toEqual([0, 0]);
    await deliverPending(w);
    expect(w.fake.subscriptions.get(stripeSubscriptionId)!.cancel_at_period_end).toBe(false);
    expect(w.fake.subscriptions.get(leaving.stripeSubscriptionId)!.cancel_at_period_end).toBe(true);
    const mine = await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: user.cookie });
    expect(mine.body.data).toMatchObject({ status: 'active', cancelAtPeriodEnd: false });
    const back = (await mailsTo(w.t, user.email)).filter((m) => m.subject === `${agent.name} is back on Agent Marketplace: your subscription renews again`);
    expect(back).toHaveLength(1);
    expect((await mailsTo(w.t, leaver.email)).map((m) => m.subject)).not.toContain(SUBJECT(agent.name));
    expect((await drain()).deletedAgents).toEqual({ renewalsStopped: 0, renewalsResumed: 0, failed: 0 });

    // deleted again: stopped again, and told again
    expect((await w.t.http.delete(`/agents/${agent.id}`, { cookie: w.admin.cookie })).status).toBe(200);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
    expect((await mailsTo(w.t, user.email)).filter((m) => m.subject === SUBJECT(agent.name))).toHaveLength(2);
  });

  it('a subscriber whose renewal payment failed (past_due) is ended now and the open invoice voided, so nothing more is collected (found by review 08)', async () => {
    const agent = await activeAgent(w);
    const user = await signUp(w.t);
    const { stripeSubscriptionId } = await buyPaidTier(w, user, (await paidTier(w, agent.id, { priceCents: 2500 })).id);
    w.fake.setPaymentMode('fails');
    w.fake.advancePeriod(stripeSubscriptionId); // the renewal's charge fails: past_due, its invoice open
    w.fake.setPaymentMode('succeeds');
    await deliverPending(w);
    expect(await first(w.t.db, sql`select status from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`)).toEqual({ status: 'past_due' });
    const renewal = w.fake.subscriptions.get(stripeSubscriptionId)!.latest_invoice as string;
    expect(w.fake.invoices.get(renewal)!.status).toBe('open');

    expect((await w.t.http.delete(`/agents/${agent.id}`, { cookie: w.admin.cookie })).status).toBe(200);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
    await deliverPending(w);
    expect(w.fake.invoices.get(renewal)!.status).toBe('void');
    expect(w.fake.subscriptions.get(stripeSubscriptionId)!.status).toBe('canceled');
    expect(await first(w.t.db, sql`select status from subscriptions where stripe_subscription_id = ${stripeSubscriptionId}`)).toEqual({ status: 'canceled' });
    const mails = (await mailsTo(w.t, user.email)).filter((m) => m.subject === SUBJECT(agent.name));
    expect(mails).toHaveLength(1);
    expect(mails[0]!.text).toContain('unpaid invoice is voided');
  });

  it('a subscription Stripe no longer knows is passed over once, not tried in every round (found by review 08)', async () => {
    const agent = await activeAgent(w);
    const user = await signUp(w.t);
    const { stripeSubscriptionId } = await buyPaidTier(w, user, (await paidTier(w, agent.id, { priceCents: 1500 })).id);
    w.fake.subscriptions.delete(stripeSubscriptionId);
    expect((await w.t.http.delete(`/agents/${agent.id}`, { cookie: w.admin.cookie })).status).toBe(200);
    const rounds = [await drain(), await drain()];
    expect(rounds.map((r) => r.deletedAgents)).toEqual([
      { renewalsStopped: 0, renewalsResumed: 0, failed: 0 },
      { renewalsStopped: 0, renewalsResumed: 0, failed: 0 },
    ]);
    expect((await mailsTo(w.t, user.email)).filter((m) => m.subject === SUBJECT(agent.name))).toHaveLength(0);
  });
});

describe('the round against faults and later choices (found by review 09)', () => {
  it("a cancel by the user or a ban after the round stays when the agent comes back: the restore resumes only the round's own", async () => {
    const a = await subscriber();
    const banned = await signUp(w.t);
    const bannedSub = await buyPaidTier(w, banned, (await paidTier(w, a.agent.id, { priceCents: 1700 })).id);
    await del(a.agent.id);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 2, failed: 0 });
    // told it will not renew, the user cancels anyway; the other is banned with their subscriptions canceled
    const cancel = await w.t.http.post(`/me/subscriptions/${a.agent.id}/cancel`, { cookie: a.user.cookie });
    expect(cancel.status, cancel.text).toBe(200);
    const ban = await w.t.http.post(`/admin/users/${banned.userId}/ban`, { cookie: w.admin.cookie, json: { cancelSubscriptions: true } });
    expect(ban.status, ban.text).toBe(200);
    await restore(a.agent.id);
    expect((await drain()).deletedAgents).toEqual({ renewalsStopped: 0, renewalsResumed: 0, failed: 0 });
    expect(w.fake.subscriptions.get(a.stripeSubscriptionId)!.cancel_at_period_end).toBe(true);
    expect(w.fake.subscriptions.get(bannedSub.stripeSubscriptionId)!.cancel_at_period_end).toBe(true);
  });

  it('a round that fails before Stripe is called is finished by the next: the user is told once, and a restore resumes it', async () => {
    const a = await subscriber();
    await del(a.agent.id);
    // the mail's insert fails once (a database hiccup): nothing is marked, nothing asked of Stripe
    await sql.raw(`create function fail_one_mail() returns trigger language plpgsql as $$
      begin raise exception 'mail insert failed (test)'; end $$`).execute(w.t.db);
    await sql`create trigger fail_one_mail before insert on mail_outbox for each row execute function fail_one_mail()`.execute(w.t.db);
    try {
      expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 0, failed: 1 });
    } finally {
      await sql`drop trigger fail_one_mail on mail_outbox`.execute(w.t.db);
      await sql`drop function fail_one_mail()`.execute(w.t.db);
    }
    expect(w.fake.subscriptions.get(a.stripeSubscriptionId)!.cancel_at_period_end).toBe(false);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
    await deliverPending(w);
    expect(w.fake.subscriptions.get(a.stripeSubscriptionId)!.cancel_at_period_end).toBe(true);
    expect(await removalMails(a.user.email, a.agent.name)).toHaveLength(1);
    await restore(a.agent.id);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsResumed: 1, failed: 0 });
    expect(w.fake.subscriptions.get(a.stripeSubscriptionId)!.cancel_at_period_end).toBe(false);
  });

  it('a void Stripe refuses for now is retried by the next round, and the subscription ended then', async () => {
    const a = await subscriber(2500);
    const renewal = await failRenewal(a.stripeSubscriptionId);
    await del(a.agent.id);
    w.fake.outage(`POST /v1/invoices/${renewal}/void`);
    try {
      expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 0, failed: 1 });
    } finally {
      w.fake.recover();
    }
    expect(w.fake.invoices.get(renewal)!.status).toBe('open');
    expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
    expect(w.fake.invoices.get(renewal)!.status).toBe('void');
    expect(w.fake.subscriptions.get(a.stripeSubscriptionId)!.status).toBe('canceled');
    expect(await removalMails(a.user.email, a.agent.name)).toHaveLength(1);
  });

  it("Stripe's state decides, not the row's: a renewal paid at Stripe whose events have not come yet runs out its period", async () => {
    const a = await subscriber(2500);
    const renewal = await failRenewal(a.stripeSubscriptionId);
    w.fake.payInvoice(renewal); // Stripe's retry succeeds; its events are not delivered yet: the row still says past_due
    await del(a.agent.id);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
    expect(w.fake.subscriptions.get(a.stripeSubscriptionId)!).toMatchObject({ status: 'active', cancel_at_period_end: true });
  });

  it('a resume that fails after Stripe was asked is finished by the next round, and a second deletion stops the renewal again', async () => {
    const a = await subscriber();
    await del(a.agent.id);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
    await deliverPending(w);
    await restore(a.agent.id);
    w.fake.outage(`GET /v1/subscriptions/${a.stripeSubscriptionId}`);
    try {
      expect((await drain()).deletedAgents).toMatchObject({ renewalsResumed: 0, failed: 1 });
    } finally {
      w.fake.recover();
    }
    await deliverPending(w);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsResumed: 1, failed: 0 });
    expect((await mailsTo(w.t, a.user.email)).filter((m) => m.subject.includes('is back on Agent Marketplace'))).toHaveLength(1);
    await del(a.agent.id);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
    expect(w.fake.subscriptions.get(a.stripeSubscriptionId)!.cancel_at_period_end).toBe(true);
  });

  it('a subscription set to end and then gone at Stripe is ended here once when the agent comes back, not tried in every round', async () => {
    const a = await subscriber();
    await del(a.agent.id);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
    w.fake.subscriptions.delete(a.stripeSubscriptionId);
    await restore(a.agent.id);
    const rounds = [await drain(), await drain()];
    expect(rounds.map((r) => r.deletedAgents)).toEqual([
      { renewalsStopped: 0, renewalsResumed: 0, failed: 0 },
      { renewalsStopped: 0, renewalsResumed: 0, failed: 0 },
    ]);
    expect(await first(w.t.db, sql`select status from subscriptions where stripe_subscription_id = ${a.stripeSubscriptionId}`)).toEqual({ status: 'canceled' });
  });
});

describe("the user's own cancel against the round (found by review 10)", () => {
  it('attack on the buyer: a portal cancel whose event has not come is not taken over by the round, so a restore does not renew it', async () => {
    // The round judged "the user chose to leave" from the row alone: a cancel made in Stripe's customer portal whose
    // event was not applied yet (Stripe retries a failed delivery for days) was marked as the round's own, and the
    // restore then renewed a subscription the user had canceled.
    const a = await subscriber();
    const stripe = w.fake.client();
    await stripe.subscriptions.update(a.stripeSubscriptionId, { cancel_at_period_end: true }); // as the portal does
    const portalEvents = w.fake.takeEvents();

    await del(a.agent.id);
    expect((await drain()).deletedAgents).toEqual({ renewalsStopped: 0, renewalsResumed: 0, failed: 0 });
    expect(await first(w.t.db, sql`select cancel_at_period_end as ending, agent_deleted_mailed_at as mark from subscriptions where id = ${a.subscriptionId}`)).toEqual({
      ending: true,
      mark: null,
    });
    expect(await removalMails(a.user.email, a.agent.name)).toHaveLength(0); // their own choice: no "will not renew"
    await deliver(w, portalEvents); // the portal's event, late

    await restore(a.agent.id);
    expect((await drain()).deletedAgents).toEqual({ renewalsStopped: 0, renewalsResumed: 0, failed: 0 });
    await deliverPending(w);
    expect(w.fake.subscriptions.get(a.stripeSubscriptionId)!.cancel_at_period_end).toBe(true);
    const mine = await w.t.http.get(`/me/subscriptions/${a.agent.id}`, { cookie: a.user.cookie });
    expect(mine.body.data).toMatchObject({ status: 'active', cancelAtPeriodEnd: true });
  });

  it("a cancel by the user while the round ends the subscription stays theirs: the restore does not renew it", async () => {
    // The round looks while the user's cancel is at Stripe (the row not ending yet) and marks the subscription as its
    // own; the cancel drops the mark again once its answer is written, so it is never undone by a restore.
    const a = await subscriber();
    await del(a.agent.id);
    const userCall = w.fake.hold(`POST /v1/subscriptions/${a.stripeSubscriptionId}`);
    const canceled = w.t.http.post(`/me/subscriptions/${a.agent.id}/cancel`, { cookie: a.user.cookie });
    await userCall.reached;
    try {
      expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
    } finally {
      userCall.release();
    }
    const res = await canceled;
    expect(res.status, res.text).toBe(200);
    expect(res.body.data).toMatchObject({ cancelAtPeriodEnd: true });
    await deliverPending(w);
    await restore(a.agent.id);
    expect((await drain()).deletedAgents).toEqual({ renewalsStopped: 0, renewalsResumed: 0, failed: 0 });
    expect(w.fake.subscriptions.get(a.stripeSubscriptionId)!.cancel_at_period_end).toBe(true);
  });
});

describe('a slow Stripe answer to the resume holds nothing else back (found by review 13)', () => {
  // A first mend of review 10 held the subscription row's lock while Stripe answered the renewal: every usage call's
  // foreign-key check on that row waited (503 after its lock timeout), and on the embedded database the transaction
  // held the one connection, so every request waited on Stripe. Here Stripe's answer is held until the test has its
  // answers (a call that waited would never answer, and the test would time out).
  it("the subscriber's usage calls, a catalog read and /ready are answered while Stripe has not answered", async () => {
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id, { priceCents: 1500 });
    const [metric] = (
      await sql<{ id: string }>`insert into metric_definitions (agent_id, slug, name, kind) values (${agent.id}, 'runs', 'runs', 'fixed') returning id`.execute(w.t.db)
    ).rows;
    await setQuota(w.t.db, tier.id, metric!.id, 1000);
    const user = await signUp(w.t, { verified: true });
    const bought = await buyPaidTier(w, user, tier.id);
    expect((await meter(w.t, user, agent.id, 'runs', 'increment', { amount: 1, clientReqId: reqId() })).status).toBe(200);
    await del(agent.id);
    expect((await drain()).deletedAgents).toMatchObject({ renewalsStopped: 1, failed: 0 });
    await deliverPending(w);
    await restore(agent.id);
    // the deletion revoked the agent's tokens: the user signs in to the restored agent again
    const token = (await accessTokenFor(w.t, user, { agentId: agent.id })).accessToken;
    const increment = () => w.t.http.post(usagePath(agent.id, 'runs', 'increment'), { bearer: token, json: { amount: 1, clientReqId: reqId() } });

    const stripeCall = w.fake.hold(`POST /v1/subscriptions/${bought.stripeSubscriptionId}`);
    let round: ReturnType<typeof drain> | undefined;
    try {
      round = drain();
      await stripeCall.reached; // the round asked Stripe to renew; no answer yet
      const [usage, catalog, ready] = await Promise.all([increment(), w.t.http.get(`/agents/${agent.id}`), w.t.http.get('/ready')]);
      expect([usage.status, catalog.status, ready.status], usage.text).toEqual([200, 200, 200]);
    } finally {
      stripeCall.release();
    }
    expect((await round).deletedAgents).toMatchObject({ renewalsResumed: 1, failed: 0 });
    expect(w.fake.subscriptions.get(bought.stripeSubscriptionId)!.cancel_at_period_end).toBe(false);
  });
});
