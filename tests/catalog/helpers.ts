import { randomUUID } from 'node:crypto';
import { expect } from 'vitest';
import type { TestApp } from '../support/app.ts';
import type { TestUser } from '../support/users.ts';
import { walkPages } from '../support/pages.ts';

/** Catalog test helpers: agents made through the real POST /agents, and small assertions on envelopes. */

export function agentBody(overrides: Record<string, unknown> = {}) {
  const tag = randomUUID().slice(0, 8);
  return {
    slug: `agent-${tag}`,
    name: `Agent ${tag}`,
    description: `Does useful things ${tag}`,
    status: 'active',
    redirectUris: ['https://agent.example.com/callback'],
    ...overrides,
  };
}

export async function createAgent(t: TestApp, admin: TestUser, overrides: Record<string, unknown> = {}) {
  const res = await t.http.post('/agents', { cookie: admin.cookie, json: agentBody(overrides) });
  if (res.status !== 201) throw new Error(`createAgent failed: ${res.status} ${res.text}`);
  return res.body.data as { id: string; slug: string; name: string; status: string; [k: string]: unknown };
}

/** A new agent's PNG upload URL and its file's public URL, signed for `sizeBytes` when given. */
export async function imageUpload(t: TestApp, admin: TestUser, sizeBytes?: number) {
  const agent = await createAgent(t, admin);
  const res = await t.http.post(`/agents/${agent.id}/uploads`, {
    cookie: admin.cookie,
    json: { kind: 'image', contentType: 'image/png', filename: 'logo.png', ...(sizeBytes === undefined ? {} : { sizeBytes }) },
  });
  expect(res.status, res.text).toBe(201);
  return res.body.data as { uploadUrl: string; publicUrl: string };
}

export function expectError(res: { status: number; body: any }, status: number, code: string) {
  expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status, code });
  expect(res.body.status).toBe('error');
  expect(res.body.data).toBeNull();
}

/** Walks a paginated list to the end, returning every item (tests/support/pages.ts; 3 a page unless given). */
export async function walk(t: TestApp, path: string, options: { cookie?: string; limit?: number } = {}) {
  return (await walkPages(t, path, { limit: options.limit ?? 3, ...(options.cookie ? { cookie: options.cookie } : {}) })).items;
}

/** An S3-compatible store (Supabase Storage's S3 endpoint) for apps that presign uploads; nothing is sent to it. */
export const S3_TEST_ENV = {
  S3_ENDPOINT: 'https://project.supabase.co/storage/v1/s3',
  S3_BUCKET: 'media',
  S3_REGION: 'eu-central-1',
  S3_ACCESS_KEY_ID: 'AKIDEXAMPLE',
  S3_SECRET_ACCESS_KEY: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
  S3_PUBLIC_URL: 'https://project.supabase.co/storage/v1/object/public/media',
};
