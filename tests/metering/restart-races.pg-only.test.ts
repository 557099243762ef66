import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFreeSubscription } from '../../functions/billing/subscriptions.ts';
import { first, rows, sql, type Db } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { eventually, statementsWaitingForLock } from '../support/databases.ts';
import { signUp } from '../support/users.ts';
import { insertUser, meter, meteredAgent, reqId, subscribe } from './support.ts';

/**
 * A free subscription cancelled and started again while usage calls on it are still in flight (they saw it live
 * before the cancel committed): migration 20261126000500, rule 4. Before, a commit or reserve committing while the
 * restart ran counted on the canceled subscription only (the carry had read the counters without their locks), and
 * a call locking its counter after the carry wrote onto the canceled one. Now the restart takes the old counters first
 * (a call holding one is waited for and carried) and marks them continued (a later write is refused with 40001, and
 * the group commit sends the call again, to the new subscription). Transactions stand for the group commit's
 * batches, which run their calls in one. Two connections at once: PostgreSQL only. Found by a race review.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ now: '2026-02-01T00:00:00.000Z' });
});
afterAll(() => t.close());

type Who = { userId: string; agentId: string };
interface Held {
  outcome: string;
  reservation_id: string;
  status: string;
}

const reserve = (db: Db, who: Who, key: string, amount: number) =>
  first<Held>(db, sql`select * from public.metering_reserve(${who.userId}, ${who.agentId}, 'sites', ${key}, ${amount}, 3600, '2026-02-01T00:00:10Z')`);
const commit = (db: Db, who: Who, id: string, amount: number) =>
  first<Held>(db, sql`select * from public.metering_settle_reservation(${who.userId}, ${who.agentId}, ${id}::uuid, 'commit', ${amount}::bigint, '2026-02-01T00:00:15Z')`);
const increment = (who: Who, key: string, amount: number) =>
  first<{ outcome: string; used: number }>(
    t.db,
    sql`select * from public.metering_increment(${who.userId}, ${who.agentId}, 'sites', ${key}, ${amount}, '2026-02-01T00:00:30Z')`,
  );

/** A user of a free tier with a fixed quota of 10 sites. */
async function subscribed() {
  t.clock.set('2026-02-01T00:00:00.000Z');
  const userId = await insertUser(t.db);
  const agent = await meteredAgent(t.db, [{ slug: 'sites', kind: 'fixed', quota: 10 }]);
  const old = await subscribe(t, userId, agent.tierId);
  return { who: { userId, agentId: agent.agentId }, tierId: agent.tierId, old };
}

/** Cancels the free subscription (its own transaction) and starts the restart, which may have to wait. */
async function cancelAndRestart(oldId: string, userId: string, tierId: string): Promise<{ restarted: Promise<unknown> }> {
  await sql`update subscriptions set status = 'canceled', canceled_at = '2026-02-01T00:00:16Z', updated_at = '2026-02-01T00:00:16Z'
            where id = ${oldId}`.execute(t.db);
  t.clock.set('2026-02-01T00:00:20.000Z');
  const restarted = startFreeSubscription(t.db, t.clock, { userId, tierId });
  restarted.catch(() => {});
  return { restarted }; // (not the promise itself: an async function would wait for it)
}

const liveUsage = async (userId: string) =>
  first<{ used: number; holds: number }>(
    t.db,
    sql`select coalesce((select sum(c.used) from usage_counters c where c.subscription_id = s.id), 0)::int as used,
               (select coalesce(sum(r.amount), 0) from usage_reservations r where r.subscription_id = s.id and r.status = 'held')::int as holds
          from subscriptions s where s.user_id = ${userId} and s.status = 'active'`,
  );

describe('a restart beside usage calls in flight on the old subscription', () => {
  it('a commit not yet committed when the restart runs: the restart waits for it and carries what it counted', async () => {
    const { who, tierId, old } = await subscribed();
    const hold = await reserve(t.db, who, 'r-1', 10);
    let restarted: Promise<unknown> | undefined;
    await t.db.transaction().execute(async (batch) => {
      expect(await commit(batch, who, hold!.reservation_id, 10)).toMatchObject({ outcome: 'ok', status: 'committed' });
      ({ restarted } = await cancelAndRestart(old.id, who.userId, tierId));
      await eventually('the restart waits for the batch', async () => (await statementsWaitingForLock(t.db, '%insert into public.subscriptions%')) > 0);
    });
    await restarted;
    expect(await liveUsage(who.userId)).toEqual({ used: 10, holds: 0 });
    expect(await increment(who, 'i-1', 1)).toMatchObject({ outcome: 'quota_exceeded' });
  });

  it('a reserve not yet committed when the restart runs (its counter new): the restart waits, and the hold moves', async () => {
    const { who, tierId, old } = await subscribed();
    let hold: Held | undefined;
    let restarted: Promise<unknown> | undefined;
    await t.db.transaction().execute(async (batch) => {
      hold = await reserve(batch, who, 'r-1', 10);
      expect(hold).toMatchObject({ outcome: 'ok', status: 'held' });
      ({ restarted } = await cancelAndRestart(old.id, who.userId, tierId));
      await eventually('the restart waits for the batch', async () => (await statementsWaitingForLock(t.db, '%insert into public.subscriptions%')) > 0);
    });
    await restarted;
    expect(await liveUsage(who.userId)).toEqual({ used: 0, holds: 10 });
    expect(await increment(who, 'i-1', 1)).toMatchObject({ outcome: 'quota_exceeded' });
    expect(await commit(t.db, who, hold!.reservation_id, 10)).toMatchObject({ outcome: 'ok', status: 'committed' });
    expect(await liveUsage(who.userId)).toEqual({ used: 10, holds: 0 });
  });

  it('a write reaching an old counter after the restart is refused with 40001, nothing written, so it is sent again', async () => {
    const { who, tierId, old } = await subscribed();
    await increment(who, 'i-0', 4);
    await (await cancelAndRestart(old.id, who.userId, tierId)).restarted;
    const metric = (await first<{ id: string }>(t.db, sql`select id from metric_definitions where agent_id = ${who.agentId}`))!.id;
    // what a call that read the old subscription as live does next: lock its counter, or add to it
    for (const write of [
      sql`select public.metering_counter_for_update(${old.id}, ${metric}, '-infinity', '2026-02-01T00:00:21Z')`,
      sql`update usage_counters set used = used + 1 where subscription_id = ${old.id}`,
    ]) {
      const err = await write.execute(t.db).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect((err as { code?: string } | undefined)?.code).toBe('40001');
    }
    expect(await rows(t.db, sql`select used::int as used from usage_counters where subscription_id = ${old.id}`)).toEqual([{ used: 4 }]);
    expect(await liveUsage(who.userId)).toEqual({ used: 4, holds: 0 });
  });
});

describe('the group commit sends a batch PostgreSQL ended to be run again', () => {
  it('a call refused once with 40001 succeeds on the next send and counts once', async () => {
    const user = await signUp(t);
    const agent = await meteredAgent(t.db, [{ slug: 'sites', kind: 'fixed', quota: 10 }]);
    await subscribe(t, user.userId, agent.tierId);
    const key = reqId();
    // A fault for this one clientReqId: its first ledger write is refused with 40001 (as a continued counter refuses).
    // A sequence counts the attempts: it is not rolled back with the refused transaction.
    await sql`create sequence test_attempts`.execute(t.db);
    await sql.raw(`
      create function test_refuse_once() returns trigger language plpgsql as $$
      begin
        if new.client_req_id = '${key}' and nextval('test_attempts') = 1 then
          raise exception 'refused once' using errcode = '40001';
        end if;
        return new;
      end $$`).execute(t.db);
    await sql`create trigger test_refuse_once before insert on quota_ledger for each row execute function test_refuse_once()`.execute(t.db);
    try {
      const res = await meter(t, user, agent.agentId, 'sites', 'increment', { clientReqId: key, amount: 3 });
      expect(res.status, res.text).toBe(200);
      expect(res.body.data).toMatchObject({ used: 3 });
      expect(await first(t.db, sql`select last_value::int as attempts from test_attempts`)).toEqual({ attempts: 2 });
      const ledger = await rows(t.db, sql`select event from quota_ledger where client_req_id = ${key}`);
      expect(ledger).toEqual([{ event: 'increment' }]);
    } finally {
      await sql`drop trigger test_refuse_once on quota_ledger`.execute(t.db);
      await sql`drop function test_refuse_once()`.execute(t.db);
      await sql`drop sequence test_attempts`.execute(t.db);
    }
  });
});
