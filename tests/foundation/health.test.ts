import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { GIT_SHA: 'abc123', RELEASE_VERSION: '1.2.3' } });
});
afterAll(() => t.close());

describe('GET /health', () => {
  it('answers the health record in the envelope', async () => {
    const res = await t.http.get('/health');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'success', error: null, data: { status: 'ok', gitSha: 'abc123', releaseVersion: '1.2.3' } });
    expect(Number.isInteger(res.body.data.uptimeSec)).toBe(true);
    expect(new Date(res.body.data.timestamp).toISOString()).toBe(res.body.data.timestamp);
    expect(res.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('echoes a client request id', async () => {
    const res = await t.http.get('/health', { headers: { 'x-request-id': 'req-42' } });
    expect(res.headers.get('x-request-id')).toBe('req-42');
  });
});

describe('GET /ready', () => {
  it('is ready while the database answers', async () => {
    const res = await t.http.get('/ready');
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ ready: true });
  });
});
