import { existsSync, readdirSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, type TestUser } from '../support/users.ts';
import { createAgent } from '../catalog/helpers.ts';

/**
 * The local uploads path (an attack a review tried, which held): an upload the client abandons half way (connection cut) must not
 * leave its partial file on the disk: the service writes to `<key>.<pid>.<time>.part` and renames it when complete,
 * so a `.part` left behind by every cut connection would fill the disk with no row pointing at it.
 */

let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp();
  admin = await createAdmin(t);
});
afterAll(() => t.close());

/** The test app's uploads directory holding this agent's files (startTestApp makes one per app under tmpdir). */
function agentUploadDirs(agentId: string): string[] {
  return readdirSync(tmpdir())
    .filter((name) => name.startsWith('mkt-uploads-'))
    .map((name) => join(tmpdir(), name, 'agents', agentId, 'video'))
    .filter((dir) => existsSync(dir));
}

describe('an upload cut off half way', () => {
  it('leaves no partial file behind', async () => {
    const agent = await createAgent(t, admin);
    const res = await t.http.post(`/agents/${agent.id}/uploads`, {
      cookie: admin.cookie,
      json: { kind: 'video', contentType: 'video/mp4', filename: 'cut.mp4' },
    });
    expect(res.status).toBe(201);
    const url = new URL(res.body.data.uploadUrl);

    await new Promise<void>((resolve) => {
      const req = request(url, { method: 'PUT', headers: { 'content-type': 'video/mp4', 'content-length': String(50 * 1024 * 1024) } });
      req.on('error', () => resolve());
      req.write(Buffer.alloc(2 * 1024 * 1024, 1), () => setTimeout(() => {
        req.destroy();
        resolve();
      }, 300));
    });

    // The write had begun (its directory exists), so a partial file existed for a moment.
    expect(agentUploadDirs(agent.id)).toHaveLength(1);
    const partial = () => agentUploadDirs(agent.id).flatMap((dir) => readdirSync(dir).filter((f) => f.endsWith('.part')));
    for (let i = 0; i < 100 && partial().length > 0; i++) await new Promise((r) => setTimeout(r, 100));
    expect(partial()).toEqual([]);
  });
});
