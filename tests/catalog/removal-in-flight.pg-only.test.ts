import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { eventually, statementsWaitingForLock } from '../support/databases.ts';
import type { CallResult } from '../support/http.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { createAgent } from './helpers.ts';

/**
 * A request authenticated before its user's removal and written after it. Found by a review (03) for reviews. Migration 20261127000200 erases a removed user's reviews with a before-delete trigger, but
 * reviews.user_id has no foreign key to "user": a review whose request was authenticated before the removal and
 * written after the trigger's DELETE ran was kept for good, listed and counted, by a user who no longer exists. The
 * review is now written under a share lock of its author's row (functions/catalog/reviews.ts), so the removal waits
 * for it and then erases it.
 *
 * The interleaving is made exact: a transaction holds the agent's row (the review's foreign key check on agent_id
 * waits for it), the review is sent and waits, the admin's removal is sent, then the agent row is let go.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

/**
 * Sends `send` while a transaction holds the agent's row (the write's foreign key check on agent_id waits for it), once
 * it waits at `writing` sends the admin's removal of `user`, then lets the agent row go; answers both responses.
 */
async function writeDuringRemoval(agentId: string, user: TestUser, send: () => Promise<CallResult>, writing: string) {
  let request: Promise<CallResult> | undefined;
  let removal: Promise<CallResult> | undefined;
  let removalAnswered = false;
  await t.db.transaction().execute(async (trx) => {
    await sql`select 1 from agents where id = ${agentId} for update`.execute(trx);
    request = send();
    await eventually('the write waits for the agent row', async () => (await statementsWaitingForLock(t.db, writing)) > 0);
    removal = t.http.post('/api/auth/admin/remove-user', { cookie: admin.cookie, headers: { origin: t.baseUrl }, json: { userId: user.userId } });
    void removal.then(() => (removalAnswered = true));
    // the removal waits for the write's hold on its user; without that hold it ran to its end meanwhile
    await eventually('the removal waits for the write, or has answered', async () =>
      removalAnswered || (await statementsWaitingForLock(t.db, '%delete from "user"%')) > 0,
    );
  });
  return [await request!, await removal!] as const;
}

describe('a review in flight while its author is removed', () => {
  it('attack: does not outlive the removal', async () => {
    const agent = await createAgent(t, admin);
    const bomber = await signUp(t);
    const [res, removed] = await writeDuringRemoval(
      agent.id,
      bomber,
      () => t.http.put(`/agents/${agent.id}/reviews`, { cookie: bomber.cookie, json: { rating: 1, title: 'Scam' } }),
      '%insert into public.reviews%',
    );
    expect(removed.status, removed.text).toBe(200);
    // Either refused, or written and then gone with its author; never a review of a user who does not exist.
    expect(await rows(t.db, sql`select 1 from "user" where id = ${bomber.userId}`)).toEqual([]);
    expect((await t.http.get(`/agents/${agent.id}`)).body.data, `review answered ${res.status}`).toMatchObject({ reviewCount: 0 });
    expect(await rows(t.db, sql`select id from reviews where user_id = ${bomber.userId}`)).toEqual([]);
  });
});

/**
 * The same interleaving for a demo request and an enterprise inquiry (found in a read-through): the requester's row was
 * read without a lock, the removal ran to its end meanwhile, and the interaction's foreign key on user_id then refused
 * the insert (500). The row is now read `for key share` (functions/catalog/engagement-requests.ts), so the removal
 * waits for the request and then strips what it recorded of the removed person's address, name and message.
 */
describe.each([
  ['demo request', 'demo-requests', 'demo_request'],
  ['enterprise inquiry', 'enterprise-inquiries', 'enterprise_inquiry'],
])('a %s in flight while its sender is removed', (_, path, type) => {
  it('answers without a 500 and keeps nothing personal of the removed sender', async () => {
    const agent = await createAgent(t, admin);
    const sender = await signUp(t);
    const [res, removed] = await writeDuringRemoval(
      agent.id,
      sender,
      () => t.http.post(`/agents/${agent.id}/${path}`, { cookie: sender.cookie, json: { message: 'call me on 555-0100' } }),
      '%insert into public.interactions%',
    );
    expect(removed.status, removed.text).toBe(200);
    expect(res.status, res.text).toBe(202);
    const recorded = await rows<{ userId: string | null; metadata: Record<string, unknown> }>(
      t.db,
      sql`select user_id as "userId", metadata from interactions where type = ${type} and agent_id = ${agent.id}`,
    );
    expect(recorded).toHaveLength(1);
    expect(recorded[0]!.userId).toBeNull();
    const kept = JSON.stringify(recorded[0]!.metadata);
    expect(kept).not.toContain(sender.email);
    expect(kept).not.toContain('555-0100');
  });
});

/**
 * The same for an install and a signed-in waitlist join (review 19): both write an `interactions` row whose user_id
 * references "user", and read the user without a lock, so a removal that ended in between made the foreign key refuse
 * the insert (500). Both now hold the user's row (functions/catalog/held-user.ts): a removal that comes second waits
 * for the write and then erases it; one that has the row first leaves the write no account: 401, nothing written.
 */
describe.each([
  ['an install', 'active', (agentId: string, u: TestUser) => t.http.post(`/agents/${agentId}/install`, { cookie: u.cookie }), '%insert into public.agent_installs%', 200],
  [
    'a signed-in waitlist join',
    'coming_soon',
    (agentId: string, u: TestUser) => t.http.post(`/agents/${agentId}/waitlist`, { cookie: u.cookie, json: { email: u.email } }),
    '%insert into public.waitlist_entries%',
    201,
  ],
] as const)('%s in flight while its user is removed', (_, status, send, writing, written) => {
  it('attack: answers without a 500, and the removal erases what it wrote', async () => {
    const agent = await createAgent(t, admin, { status });
    const user = await signUp(t);
    const [res, removed] = await writeDuringRemoval(agent.id, user, () => send(agent.id, user), writing);
    expect(removed.status, removed.text).toBe(200);
    expect(res.status, res.text).toBe(written);
    expect((await t.http.get(`/agents/${agent.id}`)).body.data.installs).toBe(0);
    expect(await rows(t.db, sql`select 1 from agent_installs where user_id = ${user.userId}`)).toEqual([]);
    expect(await rows(t.db, sql`select 1 from waitlist_entries where user_id = ${user.userId}`)).toEqual([]);
    const noted = await rows<{ userId: string | null; metadata: Record<string, unknown> }>(
      t.db,
      sql`select user_id as "userId", metadata from interactions where agent_id = ${agent.id}`,
    );
    expect(noted.map((i) => i.userId)).toEqual([null]);
    expect(JSON.stringify(noted[0]!.metadata)).not.toContain(user.email);
  });

  it('attack: removed first: answers 401 and writes nothing', async () => {
    // The request authenticated before the removal and held after it (at its read of the agent: the agents table is
    // locked); the removal, held too, has taken the user's row by then, so the write waits for it and finds no account.
    const agent = await createAgent(t, admin, { status });
    const user = await signUp(t);
    let request: Promise<CallResult> | undefined;
    let removal: Promise<CallResult> | undefined;
    await t.db.transaction().execute(async (trx) => {
      await sql`lock table public.agents in access exclusive mode`.execute(trx);
      request = send(agent.id, user);
      await eventually('the request waits for the agents table', async () => (await statementsWaitingForLock(t.db, '%from public.agents where id%')) > 0);
      removal = t.http.post('/api/auth/admin/remove-user', { cookie: admin.cookie, headers: { origin: t.baseUrl }, json: { userId: user.userId } });
      await eventually('the removal waits for the agents table', async () => (await statementsWaitingForLock(t.db, '%delete from "user"%')) > 0);
    });
    const [res, removed] = [await request!, await removal!];
    expect(removed.status, removed.text).toBe(200);
    expect([res.status, res.body.error?.code], res.text).toEqual([401, 'UNAUTHORIZED']);
    expect((await t.http.get(`/agents/${agent.id}`)).body.data.installs).toBe(0);
    expect(await rows(t.db, sql`select 1 from agent_installs where agent_id = ${agent.id}`)).toEqual([]);
    expect(await rows(t.db, sql`select 1 from waitlist_entries where agent_id = ${agent.id}`)).toEqual([]);
    expect(await rows(t.db, sql`select 1 from interactions where agent_id = ${agent.id}`)).toEqual([]);
  });
});
