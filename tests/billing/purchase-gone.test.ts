import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { linkIn, mailsTo } from '../support/mail.ts';
import { signUp } from '../support/users.ts';
import { activeAgent, deliver, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * A purchase Stripe no longer has (deleted at Stripe, or of another account or mode: the case unclaimed-purchases.ts
 * and the webhook treat as ordinary) is 422 INVALID_STATE `gone` on its claim link and on the success page, with
 * nothing used up, made or mailed. Both answered 500 INTERNAL (readToApply's `resource_missing` went through
 * untouched), the claim on every use of its link, the success page after it had made the buyer an account and mailed it.
 */
let w: BillingWorld;
beforeAll(async () => {
  w = await startBillingWorld();
});
afterAll(() => w.close());

describe('a claim link of a purchase Stripe no longer knows', () => {
  it('answers a documented 4xx in the envelope, not 500 INTERNAL, and uses nothing up', async () => {
    const tier = await paidTier(w, (await activeAgent(w)).id, { priceCents: 3300 });
    const email = `gone-${Date.now()}@example.test`;
    const holder = await signUp(w.t, { email });
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    w.fake.takeEvents();
    const sub = w.fake.completeCheckout(start.body.data.sessionId, { email });
    expect((await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId: start.body.data.sessionId } })).status).toBe(202);
    await deliver(w, w.fake.takeEvents());
    const mail = (await mailsTo(w.t, email)).find((m) => m.subject === 'Confirm your Agent Marketplace purchase')!;
    const token = linkIn(mail).searchParams.get('token')!;

    w.fake.subscriptions.delete(sub.id); // Stripe no longer knows it
    const res = await w.t.http.post('/checkout/anonymous/claim', { json: { token } });
    expect([res.status, res.body.error?.code, res.body.error?.details?.reason]).toEqual([422, 'INVALID_STATE', 'gone']);
    expect(w.t.logs.filter((l) => l.msg === 'unhandled error' && l.path === '/checkout/anonymous/claim')).toEqual([]);
    // the holder's account was not touched by a claim that could not be used
    const me = await w.t.http.get('/me', { cookie: holder.cookie });
    expect(me.status).toBe(200);
  });
});

describe('completing an anonymous checkout whose subscription Stripe no longer knows', () => {
  it('answers a documented 4xx in the envelope, not 500 INTERNAL', async () => {
    const tier = await paidTier(w, (await activeAgent(w)).id, { priceCents: 3300 });
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    const email = `gone-complete-${Date.now()}@example.test`;
    const sub = w.fake.completeCheckout(start.body.data.sessionId, { email });
    w.fake.subscriptions.delete(sub.id); // Stripe no longer knows it
    const res = await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId: start.body.data.sessionId } });
    expect([res.status, res.body.error?.code, res.body.error?.details?.reason]).toEqual([422, 'INVALID_STATE', 'gone']);
    expect(w.t.logs.filter((l) => l.msg === 'unhandled error' && l.path === '/checkout/anonymous/complete')).toEqual([]);
    // no account made for the purchase, and no mail sent
    expect(await rows(w.t.db, sql`select id from "user" where lower(email) = ${email}`)).toEqual([]);
    expect(await mailsTo(w.t, email)).toEqual([]);
  });
});
