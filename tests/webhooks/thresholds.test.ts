import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../functions/platform/db.ts';
import { meteredAgent, subscribe, insertUser } from '../metering/support.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { mailsTo } from '../support/mail.ts';
import { createAdmin, type TestUser } from '../support/users.ts';
import { addEndpoint, outboxEvents, Receiver } from './support.ts';

/**
 * public.metering_note_threshold and public.metering_note_quota_used, called directly in SQL the way the ledger
 * trigger calls them (the metering tests cover the calls from increments, holds and commits over HTTP): 80 and 100 %
 * of a positive limit, once per subscription, metric, period and threshold, the event's payload; and the user's one
 * mail per period when the units used reach the limit (migration 20261127000500: no longer from the threshold, which
 * counts holds too). Also public.webhook_emit's own rules.
 */

let t: TestApp;
let admin: TestUser;
let hook: Receiver;

beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
  hook = await Receiver.start();
});
afterAll(async () => {
  await hook.close();
  await t.close();
});

async function note(subscriptionId: string, metricId: string, periodStart: string, used: number, limit: number | null) {
  const { rows } = await sql<{ reached: number[] }>`
    select public.metering_note_threshold(${subscriptionId}, ${metricId}, ${periodStart}::text::timestamptz, ${used}, ${limit},
                                          ${t.clock.now()}) as reached`.execute(t.db);
  return rows[0]!.reached;
}

async function noteUsed(subscriptionId: string, metricId: string, periodStart: string, used: number, limit: number | null) {
  const { rows } = await sql<{ mailed: boolean }>`
    select public.metering_note_quota_used(${subscriptionId}, ${metricId}, ${periodStart}::text::timestamptz, ${used}, ${limit},
                                           ${t.clock.now()}) as mailed`.execute(t.db);
  return rows[0]!.mailed;
}

async function setup() {
  const agent = await meteredAgent(t.db, [
    { slug: 'calls', kind: 'rolling', quota: 10 },
    { slug: 'seats', kind: 'fixed', quota: 5 },
  ]);
  await addEndpoint(t, admin, agent.agentId, hook);
  const userId = await insertUser(t.db);
  const sub = await subscribe(t, userId, agent.tierId);
  const email = (await sql<{ email: string }>`select email from "user" where id = ${userId}`.execute(t.db)).rows[0]!.email;
  return { agent, userId, sub, email };
}

const fullMails = async (email: string) => (await mailsTo(t, email)).filter((m) => /used all of your/.test(m.subject));

describe('metering_note_threshold', () => {
  it('records 80 and 100 % once per period and emits each with its payload, and mails nobody', async () => {
    const { agent, userId, sub, email } = await setup();
    const calls = agent.metrics.calls!;
    const period = sub.currentPeriodStart;

    expect(await note(sub.id, calls, period, 7, 10)).toEqual([]);
    expect(await note(sub.id, calls, period, 8, 10)).toEqual([80]);
    expect(await note(sub.id, calls, period, 9, 10)).toEqual([]);
    expect(await note(sub.id, calls, period, 8, 10)).toEqual([]);
    expect(await fullMails(email)).toHaveLength(0);
    expect(await note(sub.id, calls, period, 10, 10)).toEqual([100]);
    expect(await note(sub.id, calls, period, 12, 10)).toEqual([]);

    const events = await outboxEvents(t, agent.agentId);
    expect(events.map((e) => [e.type, e.data.threshold])).toEqual([
      ['subscription.created', undefined],
      ['usage.threshold_reached', 80],
      ['usage.threshold_reached', 100],
    ]);
    expect(events[1]!.data).toEqual({ subscriptionId: sub.id, userId, metric: 'calls', threshold: 80, used: 8, limit: 10, periodStart: period });
    expect(events[2]!.data).toMatchObject({ threshold: 100, used: 10, limit: 10 });
    // its figure counts live holds too: the user's mail is metering_note_quota_used's (below)
    expect(await fullMails(email)).toHaveLength(0);

    // The next period starts over: both thresholds at once (80 first).
    const next = new Date(new Date(sub.currentPeriodEnd).getTime()).toISOString();
    expect(await note(sub.id, calls, next, 11, 10)).toEqual([80, 100]);
    expect(await fullMails(email)).toHaveLength(0);
    expect((await outboxEvents(t, agent.agentId)).slice(-2).map((e) => [e.data.threshold, e.data.periodStart])).toEqual([
      [80, next],
      [100, next],
    ]);
  });

  it('ignores unlimited, zero and missing limits, and counts a fixed metric once for the subscription’s life', async () => {
    const { agent, sub } = await setup();
    const calls = agent.metrics.calls!;
    expect(await note(sub.id, calls, sub.currentPeriodStart, 1000, null)).toEqual([]);
    expect(await note(sub.id, calls, sub.currentPeriodStart, 1000, 0)).toEqual([]);
    expect(await note(sub.id, calls, sub.currentPeriodStart, 0, 10)).toEqual([]);

    const seats = agent.metrics.seats!;
    expect(await note(sub.id, seats, '-infinity', 4, 5)).toEqual([80]);
    expect(await note(sub.id, seats, '-infinity', 5, 5)).toEqual([100]);
    expect(await note(sub.id, seats, '-infinity', 5, 5)).toEqual([]);
    const [at80] = (await outboxEvents(t, agent.agentId)).filter((e) => e.data.metric === 'seats');
    // a fixed metric's period is the subscription's life: its start, as the usage record shows it
    expect(at80!.data.periodStart).toBe(sub.createdAt);
  });
});

describe('metering_note_quota_used', () => {
  it('mails the user once per counter when the units used reach a positive limit, whatever the thresholds recorded', async () => {
    const { agent, sub, email } = await setup();
    const calls = agent.metrics.calls!;
    const period = sub.currentPeriodStart;
    // the agent's 100 % notice, reached by holds, does not stand for the mail
    expect(await note(sub.id, calls, period, 10, 10)).toEqual([80, 100]);

    expect(await noteUsed(sub.id, calls, period, 9, 10)).toBe(false);
    expect(await noteUsed(sub.id, calls, period, 10, null)).toBe(false);
    expect(await noteUsed(sub.id, calls, period, 10, 0)).toBe(false);
    expect(await fullMails(email)).toHaveLength(0);
    expect(await noteUsed(sub.id, calls, period, 10, 10)).toBe(true);
    expect(await noteUsed(sub.id, calls, period, 12, 10)).toBe(false);

    const mails = await fullMails(email);
    expect(mails).toHaveLength(1);
    expect(mails[0]!.subject).toContain('calls');
    expect(mails[0]!.text).toContain('has used 10 of 10');
    expect(mails[0]!.status).toBe('pending');

    // the next period starts over; a fixed metric's counter is the subscription's life
    const next = new Date(new Date(sub.currentPeriodEnd).getTime()).toISOString();
    expect(await noteUsed(sub.id, calls, next, 11, 10)).toBe(true);
    const seats = agent.metrics.seats!;
    expect(await noteUsed(sub.id, seats, '-infinity', 5, 5)).toBe(true);
    expect(await noteUsed(sub.id, seats, '-infinity', 5, 5)).toBe(false);
    expect(await fullMails(email)).toHaveLength(3);
  });
});

describe('webhook_emit', () => {
  it('writes nothing when no enabled endpoint wants the type, and refuses unknown types', async () => {
    const { agent } = await setup();
    const emit = (type: string) =>
      sql<{ id: string | null }>`select public.webhook_emit(${agent.agentId}, ${type}, '{"x":1}'::jsonb, ${t.clock.now()}) as id`.execute(t.db);
    const before = (await outboxEvents(t, agent.agentId)).length;
    await sql`update public.webhook_endpoints set events = array['subscription.created'] where agent_id = ${agent.agentId}`.execute(t.db);
    expect((await emit('reservation.expired')).rows[0]!.id).toBeNull();
    await sql`update public.webhook_endpoints set enabled = false where agent_id = ${agent.agentId}`.execute(t.db);
    expect((await emit('subscription.created')).rows[0]!.id).toBeNull();
    expect((await outboxEvents(t, agent.agentId)).length).toBe(before);
    await expect(emit('subscription.deleted')).rejects.toThrow(/unknown webhook event type/);
  });

  it('is not callable by the Data API roles', async () => {
    const { rows } = await sql<{ role: string; can: boolean }>`
      select r.rolname as role, has_function_privilege(r.rolname, 'public.webhook_emit(uuid, text, jsonb, timestamptz)', 'execute') as can
      from pg_roles r where r.rolname in ('anon', 'authenticated') order by 1`.execute(t.db);
    expect(rows).toEqual([
      { role: 'anon', can: false },
      { role: 'authenticated', can: false },
    ]);
    const mail = await sql<{ n: number }>`
      select count(*)::int as n from pg_roles r
      where r.rolname in ('anon', 'authenticated')
        and has_function_privilege(r.rolname, 'public.metering_note_quota_used(uuid, uuid, timestamptz, bigint, bigint, timestamptz)', 'execute')`.execute(t.db);
    expect(mail.rows[0]!.n).toBe(0);
    const tables = await sql<{ n: number }>`
      select count(*)::int as n from information_schema.role_table_grants
      where grantee in ('anon', 'authenticated') and table_schema = 'public'
        and table_name in ('webhook_endpoints', 'webhook_events', 'webhook_deliveries', 'webhook_delivery_attempts', 'usage_threshold_notices',
                           'usage_quota_mails')`.execute(t.db);
    expect(tables.rows[0]!.n).toBe(0);
  });
});
