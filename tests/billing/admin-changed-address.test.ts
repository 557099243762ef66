import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, paidTier, startBillingWorld, type BillingWorld } from '../billing/support.ts';

/**
 * Found by a review (tests/identity/admin-email-change.test.ts), the same gap seen from billing (contract.md, "Anonymous purchases": a purchase attaches at once only to a
 * new account or an existing account whose email is verified). The library's POST /api/auth/admin/update-user changes
 * an account's `email` and keeps its `emailVerified`, so an account verified for its own address, whose address an
 * admin then sets to a buyer's, takes the buyer's anonymous purchase at once, with no claim mail to the buyer.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

describe('an address an admin wrote is not a verified owner', () => {
  it("attack: a buyer's anonymous purchase does not attach to an account whose address an admin changed to the buyer's", async () => {
    const buyer = `buyer-${randomUUID().slice(0, 8)}@example.test`;
    const attacker = await signUp(w.t, { verified: true });
    // written by an operator's SQL: an admin's update-user refuses an address change (review 22)
    await w.t.db.executeQuery(sql`update "user" set email = ${buyer} where id = ${attacker.userId}`.compile(w.t.db));

    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    expect(start.status).toBe(200);
    w.fake.completeCheckout(start.body.data.sessionId, { email: buyer, name: 'The Buyer' });
    w.fake.takeEvents();
    const done = await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId: start.body.data.sessionId } });

    // Nobody proved control of the buyer's address: the purchase waits for a claim link mailed to it.
    expect(done.status, done.text).toBe(202);
    expect(done.body.data).toEqual({ claim: 'mailed' });
    const attackers = await w.t.http.get(`/me/subscriptions/${agent.id}`, { cookie: attacker.cookie });
    expect(attackers.status, attackers.text).toBe(404);
    expect((await mailsTo(w.t, buyer)).filter((m) => m.subject === 'Confirm your Agent Marketplace purchase')).toHaveLength(1);
  });
});
