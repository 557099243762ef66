import { describe, expect, it } from 'vitest';
import { first as firstRow, sql } from '../../functions/platform/db.ts';
import { REFUSAL_CACHE_MS, takeUserAndAddressAllowance, userAndAddressAllowance } from '../../functions/platform/rate-limits.ts';
import type { TestApp } from '../support/app.ts';
import { useCountingApp } from '../support/statements.ts';

/**
 * Review 121, beside tests/foundation/refusal-cache.test.ts: a request handed the address's re-ask hands it back when
 * its own user's count refuses it, but only if nobody took it since. A slow user count (held here by a row lock; on a
 * loaded database it takes 5 s) let a later request take the re-ask meanwhile, and the late hand-back rewound that
 * later mark: the next requests asked the database too while the later re-ask was still in flight.
 */

const waitingOnLocks = async (t: TestApp) =>
  (await firstRow<{ n: number }>(
    t.db,
    sql`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`,
  ))!.n;

describe("the address's re-ask handed back late", () => {
  const app = useCountingApp();

  it("does not undo a later request's re-ask: requests meanwhile are refused from memory", async () => {
    const allowance = userAndAddressAllowance(`refusal-cache-${crypto.randomUUID()}`, 'do it', 1, 2);
    const take = (u: string) => takeUserAndAddressAllowance(app.deps, { userId: u, address: '198.51.100.77' }, allowance, `${allowance.kind}|${u}`);
    expect(await take('spent-a')).toBeUndefined();
    expect(await take('spent-b')).toBeUndefined();
    expect(await take('c')).toMatchObject({ limitPerDay: 2 }); // the address refuses: cached here
    let second: Promise<unknown> | undefined;
    await app.t.db.transaction().execute(async (trx) => {
      // spent-b's count held: its request, taking the re-ask 5 s after spent-a's, waits on it.
      await sql`select 1 from public.rate_limits where key = ${`${allowance.kind}|spent-b`} for update`.execute(trx);
      app.t.clock.advance(REFUSAL_CACHE_MS);
      const first = take('spent-a'); // takes the re-ask; refused by its own count, it hands it back ...
      app.t.clock.advance(REFUSAL_CACHE_MS);
      second = take('spent-b'); // ... after this one took it (still waiting)
      for (let i = 0; i < 200 && (await waitingOnLocks(app.t)) === 0; i++) await new Promise((r) => setTimeout(r, 10));
      expect(await first).toMatchObject({ limitPerDay: 1 });
      app.reset();
      const flood = await Promise.all(Array.from({ length: 10 }, (_, i) => take(`honest-${i}`)));
      expect(flood.every((r) => r?.limitPerDay === 2)).toBe(true);
      expect(app.statements).toBe(0);
    });
    expect(await second).toMatchObject({ limitPerDay: 1 });
  });
});
