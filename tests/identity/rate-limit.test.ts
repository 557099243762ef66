import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createTestDatabase, type TestDatabase } from '../support/databases.ts';
import { signUp, type TestUser } from '../support/users.ts';
import { first, sql } from '../../functions/platform/db.ts';
import { ConfigError, loadConfig } from '../../functions/platform/config.ts';

/**
 * Rate limits (contract.md: 429 RATE_LIMITED with Retry-After; Trust boundaries: forwarded addresses and failed
 * sign-ins per account):
 * - AUTH_RATE_LIMIT_PER_MINUTE per client address and endpoint on sign-in, sign-up and the password-reset steps;
 * - the client address is the socket peer unless the peer is in TRUSTED_PROXIES (unset: none), so a client cannot
 *   pick its own address with X-Forwarded-For;
 * - AUTH_FAILED_SIGNINS_PER_ACCOUNT failed sign-ins per account per 15 minutes, from any address;
 * - the counts live in PostgreSQL: several instances on one database share them.
 * The test app normally runs with the limits off; each app here turns them on. Tests that move the clock put it back.
 */

async function withClockMoved<T>(t: TestApp, ms: number, run: () => Promise<T>): Promise<T> {
  const start = t.clock.now();
  t.clock.advance(ms);
  try {
    return await run();
  } finally {
    t.clock.set(start);
  }
}

const signInFrom = (t: TestApp, user: { email: string }, ip: string | undefined, password = 'wrong password') =>
  t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password }, headers: ip ? { 'x-forwarded-for': ip } : {} });

describe('behind a trusted proxy (TRUSTED_PROXIES=127.0.0.0/8): per client address and endpoint', () => {
  let t: TestApp;
  let user: TestUser;
  beforeAll(async () => {
    t = await startTestApp({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '3', TRUSTED_PROXIES: '127.0.0.0/8, ::1', AUTH_FAILED_SIGNINS_PER_ACCOUNT: '0' } });
    user = await signUp(t, {});
  });
  afterAll(() => t.close());

  it('the fourth sign-in within a minute from one address answers 429 RATE_LIMITED with Retry-After; other addresses are unaffected', async () => {
    for (let i = 0; i < 3; i++) expect((await signInFrom(t, user, '203.0.113.7')).status).toBe(401);
    const limited = await signInFrom(t, user, '203.0.113.7', user.password);
    expect(limited.status).toBe(429);
    expect(limited.body).toMatchObject({ status: 'error', data: null, error: { code: 'RATE_LIMITED' } });
    const retryAfter = Number(limited.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(limited.body.error.details.retryAfterSec).toBe(retryAfter);
    expect(limited.headers.getSetCookie()).toEqual([]);

    expect((await signInFrom(t, user, '203.0.113.8', user.password)).status).toBe(200);
  });

  it('a new window opens after a minute', async () => {
    for (let i = 0; i < 3; i++) await signInFrom(t, user, '198.51.100.1');
    expect((await signInFrom(t, user, '198.51.100.1')).status).toBe(429);
    await withClockMoved(t, 61_000, async () => {
      expect((await signInFrom(t, user, '198.51.100.1', user.password)).status).toBe(200);
    });
  });

  it('reads X-Forwarded-For from the right: entries the client wrote to the left of what the proxy saw do not count', async () => {
    for (let i = 0; i < 3; i++) expect((await signInFrom(t, user, `10.${i}.0.1, 192.0.2.77`)).status).toBe(401);
    expect((await signInFrom(t, user, '172.16.9.9, 192.0.2.77', user.password)).status).toBe(429);
    // Trusted hops are skipped: the client is the rightmost address that is not one of ours.
    expect((await signInFrom(t, user, '192.0.2.77, 127.0.0.5', user.password)).status).toBe(429);
  });

  it('believes X-Real-IP from a trusted proxy when there is no X-Forwarded-For', async () => {
    const from = (ip: string, password = 'wrong password') =>
      t.http.post('/api/auth/sign-in/email', { json: { email: user.email, password }, headers: { 'x-real-ip': ip } });
    for (let i = 0; i < 3; i++) expect((await from('192.0.2.200')).status).toBe(401);
    expect((await from('192.0.2.200', user.password)).status).toBe(429);
    expect((await from('192.0.2.201', user.password)).status).toBe(200);
  });

  it('counts each endpoint separately: sign-up and password reset have their own budgets', async () => {
    const ip = '192.0.2.44';
    for (let i = 0; i < 3; i++) await signInFrom(t, user, ip);
    expect((await signInFrom(t, user, ip)).status).toBe(429);
    const signUpRes = await t.http.post('/api/auth/sign-up/email', {
      json: { email: 'rl-new@example.test', password: 'rate limit pw', name: 'R' },
      headers: { 'x-forwarded-for': ip },
    });
    expect(signUpRes.status).toBe(200);
    for (let i = 0; i < 3; i++) {
      const r = await t.http.post('/api/auth/request-password-reset', {
        json: { email: user.email, redirectTo: `${t.baseUrl}/reset` },
        headers: { 'x-forwarded-for': ip },
      });
      expect(r.status).toBe(200);
    }
    const fourth = await t.http.post('/api/auth/request-password-reset', {
      json: { email: user.email, redirectTo: `${t.baseUrl}/reset` },
      headers: { 'x-forwarded-for': ip },
    });
    expect(fourth.status).toBe(429);
    expect(fourth.headers.get('retry-after')).toBeTruthy();
    for (let i = 0; i < 3; i++) {
      await t.http.post('/api/auth/reset-password', { json: { newPassword: 'whatever pw', token: 'x' }, headers: { 'x-forwarded-for': ip } });
    }
    const resetLimited = await t.http.post('/api/auth/reset-password', {
      json: { newPassword: 'whatever pw', token: 'x' },
      headers: { 'x-forwarded-for': ip },
    });
    expect(resetLimited.status).toBe(429);
  });

  it('does not limit other endpoints', async () => {
    for (let i = 0; i < 6; i++) expect((await t.http.get('/me', { cookie: user.cookie, headers: { 'x-forwarded-for': '192.0.2.99' } })).status).toBe(200);
  });

  it('keeps counts in PostgreSQL: ended windows are pruned by public.rate_limit_prune(now) and on the way by later checks', async () => {
    const count = async (like = '%') =>
      Number((await first<{ n: string }>(t.db, sql`select count(*) as n from public.rate_limits where key like ${like}`))!.n);
    await signInFrom(t, user, '192.0.2.150');
    expect(await count('%|192.0.2.150')).toBe(1);
    // Minutes later any check (here another address's) deletes ended windows on its way.
    await withClockMoved(t, 3 * 60_000, async () => {
      await signInFrom(t, user, '192.0.2.151');
    });
    expect(await count('%|192.0.2.150')).toBe(0);
    expect(await count()).toBeGreaterThan(0);
    // Past every window: the longest is the hour of account mails per recipient (recipient-allowance.ts).
    const later = new Date(t.clock.now().getTime() + 61 * 60_000);
    const pruned = await first<{ n: number }>(t.db, sql`select public.rate_limit_prune(${later}) as n`);
    expect(pruned!.n).toBeGreaterThan(0);
    expect(await count()).toBe(0);
  });
});

describe('no trusted proxy (TRUSTED_PROXIES unset): forwarded addresses are not believed', () => {
  let t: TestApp;
  let user: TestUser;
  beforeAll(async () => {
    t = await startTestApp({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '3', AUTH_FAILED_SIGNINS_PER_ACCOUNT: '0' } });
    user = await signUp(t, {});
  });
  afterAll(() => t.close());

  it('attack: rotating X-Forwarded-For (and X-Real-IP) from a loopback peer buys no extra guesses', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) {
      const res = await t.http.post('/api/auth/sign-in/email', {
        json: { email: user.email, password: `guess ${i}` },
        headers: { 'x-forwarded-for': `203.0.113.${i + 1}`, 'x-real-ip': `198.51.100.${i + 1}` },
      });
      statuses.push(res.status);
    }
    // signUp signed in once from this peer already: two guesses left in the window, then 429 whatever the headers say.
    expect(statuses.filter((s) => s === 401)).toHaveLength(2);
    expect(statuses.slice(2).every((s) => s === 429)).toBe(true);
  });

  it('on the edge (no socket peer) the platform gateway\'s X-Forwarded-For is read, rightmost entry', async () => {
    const edgeSignIn = (xff: string) =>
      t.app.request('/api/auth/sign-in/email', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-forwarded-for': xff },
        body: JSON.stringify({ email: user.email, password: 'edge guess' }),
      });
    for (let i = 0; i < 3; i++) expect((await edgeSignIn(`10.0.0.${i}, 198.18.0.1`)).status).toBe(401);
    expect((await edgeSignIn('10.9.9.9, 198.18.0.1')).status).toBe(429);
    expect((await edgeSignIn('198.18.0.1, 198.18.0.2')).status).toBe(401);
  });

  it('TRUSTED_PROXIES must be addresses or CIDR ranges: a bad value stops the start with a message naming it', () => {
    const base = { AUTH_SECRET: 'x'.repeat(40) };
    for (const bad of ['nonsense', '10.0.0.0/33', '10.0.0.1, not-an-ip', '1.2.3']) {
      let problem: unknown;
      try {
        loadConfig({ ...base, TRUSTED_PROXIES: bad });
      } catch (err) {
        problem = err;
      }
      expect(problem).toBeInstanceOf(ConfigError);
      expect((problem as ConfigError).problems.join('\n')).toContain('TRUSTED_PROXIES');
    }
    expect(loadConfig({ ...base, TRUSTED_PROXIES: '10.0.0.0/8, 192.0.2.1, 2001:db8::/32, ::1' }).trustedProxies).toHaveLength(4);
    expect(loadConfig(base).trustedProxies).toEqual([]);
    expect(loadConfig(base).authFailedSigninsPerAccount).toBe(10);
    expect(() => loadConfig({ ...base, AUTH_FAILED_SIGNINS_PER_ACCOUNT: '-1' })).toThrow(/AUTH_FAILED_SIGNINS_PER_ACCOUNT/);
  });
});

describe('failed sign-ins per account (AUTH_FAILED_SIGNINS_PER_ACCOUNT=3)', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '0', TRUSTED_PROXIES: '127.0.0.1', AUTH_FAILED_SIGNINS_PER_ACCOUNT: '3' } });
  });
  afterAll(() => t.close());

  it('attack: guesses from ever new addresses; after 3 failures the account answers 429 from any address, even to the right password, until 15 minutes pass', async () => {
    const victim = await signUp(t);
    for (let i = 0; i < 3; i++) expect((await signInFrom(t, victim, `203.0.113.${10 + i}`)).status).toBe(401);
    const locked = await signInFrom(t, victim, '198.51.100.77', victim.password);
    expect(locked.status).toBe(429);
    expect(locked.body).toMatchObject({ status: 'error', error: { code: 'RATE_LIMITED' } });
    const retryAfter = Number(locked.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThan(60);
    expect(retryAfter).toBeLessThanOrEqual(15 * 60);
    expect(locked.headers.getSetCookie()).toEqual([]);
    // The same account spelled differently is the same account.
    expect((await signInFrom(t, { email: victim.email.toUpperCase() }, '198.51.100.78', victim.password)).status).toBe(429);

    // Another account is not affected.
    const other = await signUp(t);
    expect((await signInFrom(t, other, '203.0.113.10', other.password)).status).toBe(200);

    await withClockMoved(t, 15 * 60_000 + 1_000, async () => {
      expect((await signInFrom(t, victim, '198.51.100.77', victim.password)).status).toBe(200);
    });
  });

  it('successful sign-ins do not count as failures', async () => {
    const user = await signUp(t);
    for (let i = 0; i < 5; i++) expect((await signInFrom(t, user, undefined, user.password)).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await signInFrom(t, user, undefined)).status).toBe(401);
    expect((await signInFrom(t, user, undefined, user.password)).status).toBe(200);
  });

  it('attack: concurrent guesses cannot overrun the limit while the first ones are being checked', async () => {
    const user = await signUp(t);
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => signInFrom(t, user, `203.0.113.${100 + i}`, `parallel guess ${i}`)),
    );
    const statuses = results.map((r) => r.status).sort();
    expect(statuses.filter((s) => s === 401)).toHaveLength(3);
    expect(statuses.filter((s) => s === 429)).toHaveLength(9);
  });

  it('attack: a sign-in sent as a form (which the library also reads) is refused with 415, so no guess escapes the count', async () => {
    // The count read JSON bodies only: form-encoded guesses from rotating addresses met no per-account limit.
    const victim = await signUp(t);
    for (const type of ['application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'text/plain', '']) {
      const res = await t.http.post('/api/auth/sign-in/email', {
        headers: { 'content-type': type, 'x-forwarded-for': '203.0.113.200' },
        body: new URLSearchParams({ email: victim.email, password: 'a wrong guess' }).toString(),
      });
      expect([type, res.status]).toEqual([type, 415]);
    }
    // nothing was spent: three JSON guesses still get to the password check, the fourth is refused
    for (let i = 0; i < 3; i++) expect((await signInFrom(t, victim, `203.0.113.${150 + i}`)).status).toBe(401);
    expect((await signInFrom(t, victim, '203.0.113.160', victim.password)).status).toBe(429);
  });

  it('unknown accounts are limited the same way (nothing tells them apart)', async () => {
    const ghost = { email: `nobody-${Date.now()}@example.test` };
    for (let i = 0; i < 3; i++) expect((await signInFrom(t, ghost, undefined)).status).toBe(401);
    expect((await signInFrom(t, ghost, undefined)).status).toBe(429);
  });
});

describe('three instances on one database share the limits', () => {
  let database: TestDatabase;
  const apps: TestApp[] = [];
  beforeAll(async () => {
    database = await createTestDatabase();
    for (let i = 0; i < 3; i++) {
      apps.push(
        await startTestApp({
          testDatabase: database,
          env: { AUTH_RATE_LIMIT_PER_MINUTE: '5', TRUSTED_PROXIES: '127.0.0.1', AUTH_FAILED_SIGNINS_PER_ACCOUNT: '4' },
        }),
      );
    }
  });
  afterAll(async () => {
    for (const app of apps) await app.close();
    await database?.drop();
  });

  it('per address: 15 concurrent sign-ins spread over three instances admit exactly the limit (5)', async () => {
    const results = await Promise.all(
      Array.from({ length: 15 }, (_, i) => signInFrom(apps[i % 3]!, { email: `spread-${i}@example.test` }, '192.0.2.33')),
    );
    expect(results.filter((r) => r.status === 401)).toHaveLength(5);
    expect(results.filter((r) => r.status === 429)).toHaveLength(10);
  });

  it('per account: failures on one instance lock the account on the others', async () => {
    const user = await signUp(apps[1]!);
    const results = await Promise.all(
      Array.from({ length: 9 }, (_, i) => signInFrom(apps[i % 3]!, user, `198.51.100.${i + 1}`, `guess ${i}`)),
    );
    expect(results.filter((r) => r.status === 401)).toHaveLength(4);
    expect(results.filter((r) => r.status === 429)).toHaveLength(5);
    for (const app of apps) expect((await signInFrom(app, user, '198.51.100.200', user.password)).status).toBe(429);
  });

  it('a restarted instance remembers the count', async () => {
    const restarted = await startTestApp({
      testDatabase: database,
      env: { AUTH_RATE_LIMIT_PER_MINUTE: '5', TRUSTED_PROXIES: '127.0.0.1', AUTH_FAILED_SIGNINS_PER_ACCOUNT: '4' },
    });
    try {
      expect((await signInFrom(restarted, { email: 'spread-0@example.test' }, '192.0.2.33')).status).toBe(429);
    } finally {
      await restarted.close();
    }
  });
});

describe('AUTH_RATE_LIMIT_PER_MINUTE=0 and AUTH_FAILED_SIGNINS_PER_ACCOUNT=0', () => {
  it('disable the limits', async () => {
    const open = await startTestApp({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '0', AUTH_FAILED_SIGNINS_PER_ACCOUNT: '0' } });
    try {
      const u = await signUp(open);
      for (let i = 0; i < 12; i++) {
        const r = await open.http.post('/api/auth/sign-in/email', { json: { email: u.email, password: 'nope nope' } });
        expect(r.status).toBe(401);
      }
    } finally {
      await open.close();
    }
  });
});
