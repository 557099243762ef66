import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { holdOpen } from '../support/databases.ts';
import { deliverMail, mailsTo } from '../support/mail.ts';
import { sql } from '../../functions/platform/db.ts';
import { PASSWORD_RESET_SUBJECT } from '../../functions/auth/index.ts';
import { activeAgent, paidTier, startBillingWorld, type BillingWorld } from './support.ts';

/**
 * An anonymous purchase's new account commits, then its "choose your password" mail is queued in the auth library's
 * own transaction (functions/billing/buyer-accounts.ts). A database connection lost between the two (a failover, a
 * cut connection) left a paid buyer with an account nobody could sign in to and no mail, for good: every later call
 * (the success page again, Stripe's redelivery) found the account made for the purchase and mailed nothing, while the
 * page said a link was mailed (found by review 42). Now a later call, over a minute on, mails it.
 */

let w: BillingWorld;
let admin: postgres.Sql;
beforeAll(async () => {
  w = await startBillingWorld();
  admin = postgres(w.t.databaseUrl!, { max: 1, onnotice: () => {} });
});
afterAll(async () => {
  await admin?.end();
  await w?.close();
});


describe('an anonymous buyer whose set-password mail met a lost database connection', () => {
  it('still gets the set-password mail (the success page, called again, says it was mailed)', async () => {
    const email = `lost-mail-buyer-${Date.now()}@example.test`;
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    expect(start.status).toBe(200);
    const sessionId = start.body.data.sessionId as string;
    w.fake.takeEvents();
    w.fake.completeCheckout(sessionId, { email, name: 'Ann Buyer' });
    w.fake.takeEvents();

    // The outbox is held (another connection's lock), so the mail's insert waits inside PostgreSQL; then the
    // connection it waits on is cut, as a failover or a network drop does.
    const locker = postgres(w.t.databaseUrl!, { max: 1, onnotice: () => {} });
    const held = await holdOpen(locker, (tx) => tx.unsafe('lock table public.mail_outbox in access exclusive mode'));
    const completing = w.t.http.post('/checkout/anonymous/complete', { json: { sessionId } });
    let pid: number | undefined;
    for (let i = 0; i < 2000 && !pid; i++) {
      const [row] = await admin<{ pid: number }[]>`
        select pid from pg_stat_activity
         where datname = current_database() and application_name = 'agent-marketplace'
           and wait_event_type = 'Lock' and query ilike '%mail_outbox%'`;
      pid = row?.pid;
      if (!pid) await new Promise((r) => setTimeout(r, 10));
    }
    expect(pid, 'the set-password mail waits for the outbox').toBeDefined();
    await admin`select pg_terminate_backend(${pid!})`;
    await held.release();
    await locker.end();

    const first = await completing;
    // (whatever the first answer: 200 or a retryable 503)
    expect([200, 503]).toContain(first.status);

    // Within the minute a call mails nothing (the success page and the webhook together must not both mail)...
    const soon = await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId } });
    expect(soon.status).toBe(200);
    const setPasswordMails = async () => (await mailsTo(w.t, email)).filter((m) => m.subject === PASSWORD_RESET_SUBJECT);
    expect(await setPasswordMails()).toHaveLength(0);
    // ...a minute on, the buyer (or Stripe's redelivery) comes back and the mail goes out, once.
    // (five calls at once: one mails; review 43)
    w.t.clock.advance(61_000);
    try {
      const again = await Promise.all(Array.from({ length: 5 }, () => w.t.http.post('/checkout/anonymous/complete', { json: { sessionId } })));
      for (const res of again) {
        expect(res.status).toBe(200);
        expect(res.body.data).toMatchObject({ created: true, user: { email } });
      }
    } finally {
      w.t.clock.set(new Date());
    }
    expect(
      (await setPasswordMails()).length,
      `first answer ${first.status}; warnings: ${JSON.stringify(w.t.logs.filter((l) => l.level === 'warn').map((l) => l.msg))}`,
    ).toBe(1);
  });

  it('attack: a delivered one is not sent again once the outbox has pruned it, by calls one after another or at once (review 43)', async () => {
    const email = `pruned-mail-buyer-${Date.now()}@example.test`;
    const agent = await activeAgent(w);
    const tier = await paidTier(w, agent.id);
    const start = await w.t.http.post('/checkout/anonymous', { json: { tierId: tier.id } });
    const sessionId = start.body.data.sessionId as string;
    w.fake.takeEvents();
    w.fake.completeCheckout(sessionId, { email, name: 'Ann Buyer' });
    w.fake.takeEvents();
    expect((await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId } })).status).toBe(200);
    const resetMails = async () => (await mailsTo(w.t, email)).filter((m) => m.subject === PASSWORD_RESET_SUBJECT);
    expect(await resetMails()).toHaveLength(1);
    await deliverMail(w.t);
    // Eight days on, the housekeeping prunes the delivered mail (7-day retention); whoever holds the session id posts it.
    w.t.clock.advance(8 * 24 * 3600_000);
    try {
      await sql`select public.mail_outbox_prune(${w.t.clock.now()}, 1000)`.execute(w.t.db);
      expect(await resetMails()).toHaveLength(0);
      const again = await Promise.all(Array.from({ length: 5 }, () => w.t.http.post('/checkout/anonymous/complete', { json: { sessionId } })));
      expect(again.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
      expect((await w.t.http.post('/checkout/anonymous/complete', { json: { sessionId } })).status).toBe(200);
    } finally {
      w.t.clock.set(new Date());
    }
    expect(await resetMails()).toHaveLength(0);
  });
});
