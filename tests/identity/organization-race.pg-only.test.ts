import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { signUp, type TestUser } from '../support/users.ts';

/**
 * The same organization created twice at once: the library checks the slug, then inserts, so the second insert of a
 * race failed on organization_slug_key and the library answered 500 (found by a review's probe). Sent one after the
 * other, the second answers 400 ORGANIZATION_ALREADY_EXISTS; at once, the contract's 409 CONFLICT.
 */

let t: TestApp;
let user: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  user = await signUp(t, { verified: true });
});
afterAll(() => t?.close());

describe('organization/create raced on one slug', () => {
  it('answers 200 once and 4xx to the rest, never 500', async () => {
    const answers = await Promise.all(
      Array.from({ length: 10 }, () =>
        t.http.post('/api/auth/organization/create', {
          cookie: user.cookie,
          headers: { origin: t.baseUrl },
          json: { name: 'Race org', slug: 'race-org' },
        }),
      ),
    );
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    expect(statuses.filter((s) => s !== 200 && s !== 400 && s !== 409), JSON.stringify(answers.map((a) => a.text.slice(0, 120)))).toEqual([]);
    for (const a of answers.filter((x) => x.status === 409)) expect(a.body.error.code).toBe('CONFLICT');
    expect(t.logs.filter((l) => l.level === 'error')).toEqual([]);
  });
});
