import { afterAll, beforeAll } from 'vitest';
import { startTestApp, type TestApp } from './app.ts';

/**
 * The deps a rate limit takes (platform/rate-limits.ts), over the app's own database handle and clock, counting every
 * statement sent through it: what a flood costs the database, as a number.
 */
export function countingDeps(t: TestApp, count: () => void) {
  const db = t.deps.database.db;
  const counting = new Proxy(db, {
    get(target, prop, receiver) {
      if (prop === 'getExecutor') {
        return () => {
          const executor = target.getExecutor();
          return new Proxy(executor, {
            get(e, p, r) {
              if (p === 'executeQuery') return (...args: Parameters<typeof executor.executeQuery>) => (count(), executor.executeQuery(...args));
              const v = Reflect.get(e, p, r);
              return typeof v === 'function' ? v.bind(e) : v;
            },
          });
        };
      }
      const v = Reflect.get(target, prop, receiver);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  return { database: { db: counting as typeof db }, clock: t.clock };
}

/**
 * A test app for the file, started before its first test and closed after its last, with rate-limit deps counting its
 * statements: `statements` since the last `reset()`.
 */
export function useCountingApp() {
  const counted = {
    t: undefined as unknown as TestApp,
    deps: undefined as unknown as ReturnType<typeof countingDeps>,
    statements: 0,
    reset() {
      counted.statements = 0;
    },
  };
  beforeAll(async () => {
    counted.t = await startTestApp();
    counted.deps = countingDeps(counted.t, () => counted.statements++);
  });
  afterAll(() => counted.t?.close());
  return counted;
}
