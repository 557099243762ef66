import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { accessTokenFor } from '../support/oauth.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { createAgent } from './helpers.ts';

/**
 * Reviews and agents' backends (review 49). contract.md lets an agent's token act on reviews of its own agent, as the
 * user; a hostile agent's backend, holding the tokens of the users who consented to it, replaced their 1-star reviews
 * with 5-star ones, or deleted them, and nothing told the public. Now such a review is marked `writtenByAgent`, and a
 * review the user wrote themselves is changed or deleted only by them (or an admin). And the author's id, which is the
 * id every agent the author uses knows them by, is shown only to the author and admins: any agent's backend read from
 * the public list which of its users reviewed which other agent, and what they wrote.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t?.close());

const reviewsOf = async (agentId: string, auth: { cookie?: string; bearer?: string } = {}) =>
  (await t.http.get(`/agents/${agentId}/reviews`, auth)).body.data as Array<Record<string, unknown>>;
const write = (agentId: string, auth: { cookie?: string; bearer?: string }, json: Record<string, unknown>) =>
  t.http.put(`/agents/${agentId}/reviews`, { ...auth, ...(auth.cookie ? { headers: { origin: t.baseUrl } } : {}), json });

describe("an agent's backend and the reviews of its agent", () => {
  it("attack: the agent's token can neither replace nor delete the review the user wrote themselves", async () => {
    const agent = await createAgent(t, admin, { name: 'Review Rewriter' });
    const user = await signUp(t);
    const { accessToken } = await accessTokenFor(t, user, { agentId: agent.id, scope: 'openid' });
    const own = await write(agent.id, { cookie: user.cookie }, { rating: 1, title: 'Lost my data' });
    expect(own.status, own.text).toBe(201);
    expect(own.body.data.writtenByAgent).toBe(false);

    const replaced = await write(agent.id, { bearer: accessToken }, { rating: 5, title: 'Best agent ever' });
    expect(replaced.status, replaced.text).toBe(403);
    const deleted = await t.http.delete(`/agents/${agent.id}/reviews/${own.body.data.id}`, { bearer: accessToken });
    expect(deleted.status, deleted.text).toBe(403);

    expect((await reviewsOf(agent.id)).map((r) => [r.rating, r.title, r.writtenByAgent])).toEqual([[1, 'Lost my data', false]]);
    expect((await t.http.get(`/agents/${agent.id}`)).body.data).toMatchObject({ reviewCount: 1, averageRating: 1 });
  });

  it("a review the agent's backend writes is marked so; it may change or delete it, and the user takes it over by writing", async () => {
    const agent = await createAgent(t, admin, { name: 'Review Helper' });
    const user = await signUp(t);
    const { accessToken } = await accessTokenFor(t, user, { agentId: agent.id, scope: 'openid' });
    const written = await write(agent.id, { bearer: accessToken }, { rating: 4, title: 'Pretty good' });
    expect(written.status, written.text).toBe(201);
    // Without the author's id, as every read shows it to an agent's token (review 112: the write's answer had it).
    expect({ writtenByAgent: written.body.data.writtenByAgent, userId: written.body.data.userId }).toEqual({ writtenByAgent: true, userId: null });
    expect((await reviewsOf(agent.id)).map((r) => r.writtenByAgent)).toEqual([true]);
    expect((await write(agent.id, { bearer: accessToken }, { rating: 5 })).status).toBe(200);

    // the user writes it themselves: theirs from now on
    const taken = await write(agent.id, { cookie: user.cookie }, { rating: 3, title: 'It is fine' });
    expect([taken.status, taken.body.data.writtenByAgent]).toEqual([200, false]);
    expect((await write(agent.id, { bearer: accessToken }, { rating: 5 })).status).toBe(403);

    // one the agent's backend wrote it may delete
    const other = await signUp(t);
    const otherToken = (await accessTokenFor(t, other, { agentId: agent.id, scope: 'openid' })).accessToken;
    const agentsOwn = await write(agent.id, { bearer: otherToken }, { rating: 5 });
    expect(agentsOwn.status).toBe(201);
    expect((await t.http.delete(`/agents/${agent.id}/reviews/${agentsOwn.body.data.id}`, { bearer: otherToken })).status).toBe(200);
    // and the user, or an admin, deletes any of theirs
    expect((await t.http.delete(`/agents/${agent.id}/reviews/${taken.body.data.id}`, { cookie: admin.cookie, headers: { origin: t.baseUrl } })).status).toBe(200);
    expect(await reviewsOf(agent.id)).toEqual([]);
  });
});

describe("a review's author", () => {
  it("attack: another agent's backend cannot tell, from the public list, which of its users wrote a review", async () => {
    const spy = await createAgent(t, admin, { name: 'Spying Agent' });
    const rival = await createAgent(t, admin, { name: 'Rival Agent' });
    const user = await signUp(t);
    const { accessToken } = await accessTokenFor(t, user, { agentId: spy.id, scope: 'openid' });
    const me = await t.http.get('/me', { bearer: accessToken });
    expect(me.body.data.id).toBe(user.userId);
    expect((await write(rival.id, { cookie: user.cookie }, { rating: 2, title: 'Switching away' })).status).toBe(201);

    const listed = await reviewsOf(rival.id);
    expect(listed.map((r) => [r.userId, r.title])).toEqual([[null, 'Switching away']]);
    expect(JSON.stringify(listed)).not.toContain(user.userId);
  });

  it('is shown to the author (with their own credentials) and to admins', async () => {
    const agent = await createAgent(t, admin, { name: 'Reviewed Agent' });
    const author = await signUp(t);
    const reader = await signUp(t);
    expect((await write(agent.id, { cookie: author.cookie }, { rating: 4 })).body.data.userId).toBe(author.userId);
    expect((await reviewsOf(agent.id, { cookie: author.cookie }))[0]!.userId).toBe(author.userId);
    expect((await reviewsOf(agent.id, { cookie: reader.cookie }))[0]!.userId).toBeNull();
    expect((await reviewsOf(agent.id, { cookie: admin.cookie }))[0]!.userId).toBe(author.userId);
    // an agent's token of the author reads it as anyone does
    const { accessToken } = await accessTokenFor(t, author, { agentId: agent.id, scope: 'openid' });
    expect((await reviewsOf(agent.id, { bearer: accessToken }))[0]!.userId).toBeNull();
  });
});

describe("an agent's backend deleting reviews with a user's token", () => {
  it("attack: cannot tell, from the refusals, which review of its agent that user wrote (review 52)", async () => {
    const agent = await createAgent(t, admin, { name: 'Retaliating Agent' });
    const critic = await signUp(t);
    for (const fan of [await signUp(t), await signUp(t)]) expect((await write(agent.id, { cookie: fan.cookie }, { rating: 5, title: 'Great' })).status).toBe(201);
    expect((await write(agent.id, { cookie: critic.cookie }, { rating: 1, title: 'Terrible, leaving' })).status).toBe(201);
    const { accessToken } = await accessTokenFor(t, critic, { agentId: agent.id, scope: 'openid' });
    const listed = await reviewsOf(agent.id, { bearer: accessToken });
    expect(listed.every((r) => r.userId === null)).toBe(true);

    const answers = [];
    for (const r of listed) {
      const res = await t.http.delete(`/agents/${agent.id}/reviews/${r.id as string}`, { bearer: accessToken });
      answers.push(`${res.status} ${res.body?.error?.code} ${res.body?.error?.message}`);
    }
    expect(answers).toHaveLength(3);
    expect(new Set(answers).size, answers.join(' | ')).toBe(1);
    expect(answers[0]).toMatch(/^403 FORBIDDEN/);
  });
});
