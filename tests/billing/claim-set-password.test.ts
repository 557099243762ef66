import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { linkIn, mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, deliver, paidTier, startBillingWorld, type BillingWorld } from '../billing/support.ts';

/**
 * A mailed reset link ends the user's earlier mailed links (docs/identity.md), never the set-password token a purchase
 * claim hands to whoever just proved the mailbox (claim-purchase.ts, passwordResetToken), which is stored as a reset
 * token but never mailed. Anyone may ask for a reset of any address: review 18 found a stranger's request, right after
 * the claim, broke the claimant's set-password step (400 INVALID_TOKEN).
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

describe("a purchase claim's set-password token", () => {
  it("attack: a stranger's reset request for the buyer's address right after the claim leaves the claim's set-password step working", async () => {
    const email = `claim-victim-${Date.now()}@example.test`;
    await signUp(w.t, { email, name: 'Pre-registrant' }); // unverified holder: the purchase gets a claim link
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    w.fake.takeEvents();
    w.fake.completeCheckout(start.body.data.sessionId, { email, name: 'Ann Buyer' });
    await deliver(w, w.fake.takeEvents());
    const mail = (await mailsTo(w.t, email)).find((m) => m.subject === 'Confirm your Agent Marketplace purchase')!;
    const claimed = await w.t.http.post('/checkout/anonymous/claim', { json: { token: linkIn(mail).searchParams.get('token') } });
    expect(claimed.status, claimed.text).toBe(200);
    const setPasswordToken = claimed.body.data.passwordResetToken as string;

    // The attacker (no account, no cookie) asks for a reset of the buyer's address.
    const asked = await w.t.http.post('/api/auth/request-password-reset', { json: { email, redirectTo: `${w.t.baseUrl}/reset-password` } });
    expect(asked.status).toBe(200);

    // The buyer's set-password step, the next screen of the claim page, should still work.
    const set = await w.t.http.post('/api/auth/reset-password', { json: { newPassword: 'the buyer chose this', token: setPasswordToken } });
    expect([set.status, set.body?.code], set.text).toEqual([200, undefined]);
  });
});
