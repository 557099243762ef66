import { describe, expect, it } from 'vitest';
import { useCountingApp } from '../support/statements.ts';
import { REFUSAL_CACHE_MS, refundToken, takeToken, takeUserAndAddressAllowance, userAndAddressAllowance } from '../../functions/platform/rate-limits.ts';

/**
 * A refused key's cached refusal is asked of the database again every REFUSAL_CACHE_MS (review 115), by one request:
 * review 117 found every request of a flood in flight when it went stale asking, 50 statements for 50 requests, and an
 * allowance refused by the address's count taking and giving back each request's user count. Measured here on one app:
 * the statements sent through its database for a key already refused.
 */
describe('a refused flood costs the database one request every REFUSAL_CACHE_MS', () => {
  const app = useCountingApp();

  it('a flood of 50 concurrent requests on a refused key, after the cached refusal expires, sends one statement, not 50', async () => {
    const key = `refusal-cache|${crypto.randomUUID()}`;
    expect((await takeToken(app.deps, key, 1, 60 * 60 * 1000)).allowed).toBe(true);
    expect((await takeToken(app.deps, key, 1, 60 * 60 * 1000)).allowed).toBe(false); // refused, cached
    app.reset();
    await Promise.all(Array.from({ length: 50 }, () => takeToken(app.deps, key, 1, 60 * 60 * 1000)));
    expect(app.statements).toBe(0); // within REFUSAL_CACHE_MS: from memory
    app.t.clock.advance(REFUSAL_CACHE_MS);
    const verdicts = await Promise.all(Array.from({ length: 50 }, () => takeToken(app.deps, key, 1, 60 * 60 * 1000)));
    expect(verdicts.every((v) => !v.allowed)).toBe(true);
    expect(app.statements).toBe(1);
  });

  it("a flood refused by the address's daily count asks again with one request: its take, the address's refusal, the give-back", async () => {
    const allowance = userAndAddressAllowance(`refusal-cache-${crypto.randomUUID()}`, 'do it', 50, 1);
    const asker = (userId: string) => ({ userId, address: '203.0.113.7' });
    expect(await takeUserAndAddressAllowance(app.deps, asker('u1'), allowance, `${allowance.kind}|u1`)).toBeUndefined();
    expect(await takeUserAndAddressAllowance(app.deps, asker('u2'), allowance, `${allowance.kind}|u2`)).toMatchObject({ limitPerDay: 1 });
    app.t.clock.advance(REFUSAL_CACHE_MS);
    app.reset();
    const refused = await Promise.all(
      Array.from({ length: 20 }, (_, i) => takeUserAndAddressAllowance(app.deps, asker(`u${i + 3}`), allowance, `${allowance.kind}|u${i + 3}`)),
    );
    expect(refused.every((r) => r?.limitPerDay === 1)).toBe(true);
    expect(app.statements).toBe(3);
  });

  it("the address's re-ask is not spent by a request its own user's count refuses (review 119)", async () => {
    // An address's count used up, then room given back on another instance: another account there is admitted once
    // the refusal is REFUSAL_CACHE_MS old, though an account whose own day is spent asked first (it took the re-ask
    // and returned without asking: the address stayed refused here for the day).
    const allowance = userAndAddressAllowance(`refusal-cache-${crypto.randomUUID()}`, 'do it', 1, 2);
    const take = (u: string) => takeUserAndAddressAllowance(app.deps, { userId: u, address: '198.51.100.9' }, allowance, `${allowance.kind}|${u}`);
    expect(await take('spent')).toBeUndefined();
    expect(await take('other-1')).toBeUndefined();
    expect(await take('other-2')).toMatchObject({ limitPerDay: 2 }); // the address refuses: cached here
    await refundToken({ database: app.t.deps.database, clock: app.t.clock }, `${allowance.kind}|address|198.51.100.9`); // another instance
    app.t.clock.advance(REFUSAL_CACHE_MS);
    expect(await take('spent')).toMatchObject({ limitPerDay: 1 });
    expect(await take('honest')).toBeUndefined();
  });
});
