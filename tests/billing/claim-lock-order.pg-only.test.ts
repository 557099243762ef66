import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { eventually, statementsWaitingForLock } from '../support/databases.ts';
import type { CallResult } from '../support/http.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A purchase claim and a password change of the same account at the same moment (migration
 * 20261125001100). Every password write takes the credential account's row and then, in its trigger, the user's row
 * (public.revoke_user_credentials). The claim used to take the user's row first and the account's next, so the two
 * deadlocked and PostgreSQL aborted one of them (a 500 for the claim, or a failed password change).
 *
 * The interleaving is made exact: a transaction takes the account row as a password write does first; the claim is
 * sent and waits; then the same transaction writes the password (its trigger locks the user's row) and commits. Two
 * connections at once, so PostgreSQL only.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

const claimWaits = () =>
  eventually('the claim waits for the account row', async () => (await statementsWaitingForLock(w.t.db, '%billing_claim_purchase%')) > 0);

describe('a purchase claim beside a password change', () => {
  it('both go through, in one lock order', async () => {
    // An unverified account holds the address; the buyer paid anonymously with it and got the claim link.
    const email = `claim-lock-${Date.now()}@example.test`;
    const holder = await signUp(w.t, { email, name: 'Holder' });
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    w.fake.completeCheckout(start.body.data.sessionId, { email, name: 'Ann Buyer' });
    expect((await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId: start.body.data.sessionId } })).status).toBe(202);
    const mail = (await mailsTo(w.t, email)).find((m) => m.subject === 'Confirm your Agent Marketplace purchase')!;
    const token = linkIn(mail).searchParams.get('token')!;

    let claimed: Promise<CallResult> | undefined;
    await w.t.db.transaction().execute(async (trx) => {
      // the first lock of a password write: the credential row
      await sql`select 1 from account where "userId" = ${holder.userId} and "providerId" = 'credential' for update`.execute(trx);
      claimed = w.t.http.post('/checkout/anonymous/claim', { json: { token } });
      await claimWaits();
      // the write itself; its trigger locks the user's row next
      await sql`update account set password = ${'changed-while-claiming'}
                 where "userId" = ${holder.userId} and "providerId" = 'credential'`.execute(trx);
    });
    const res = await claimed!;
    expect(res.status, res.text).toBe(200);
    expect(res.body.data).toMatchObject({ user: { id: holder.userId, email }, subscription: { agentId: agent.id, status: 'active' } });
  });
});
