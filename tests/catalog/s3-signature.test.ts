import { createHash, createHmac } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createAdmin, type TestUser } from '../support/users.ts';
import { createAgent } from './helpers.ts';

/**
 * The S3 presigned upload URL (createUpload with S3_* configured) verified the way S3 verifies it: the AWS
 * Signature Version 4 query-string algorithm ("Authenticating Requests: Using Query Parameters", Amazon S3 API
 * reference) written out here with node:crypto, independently of aws4fetch that the service signs with. The
 * verifier first reproduces AWS's own published example, so a mistake in it cannot pass silently; then it checks
 * the service's URL with the secret key and the headers the service tells the browser to send, and shows that a
 * PUT with another content type, size, key or method, or signed with another secret, would be refused.
 *
 * (No local S3 server is used: s3rver, the S3-compatible server on the npm registry, does not check V4 signatures
 * (its 3.7.1 accepts any), and none is packaged in Debian.)
 */

const sha256 = (data: string) => createHash('sha256').update(data, 'utf8').digest('hex');
const hmac = (key: string | Buffer, data: string) => createHmac('sha256', key).update(data, 'utf8').digest();

/** RFC 3986 unreserved characters stay; everything else is %XX (upper case), as SigV4 requires. */
function uriEncode(value: string, keepSlash: boolean): string {
  return [...Buffer.from(value, 'utf8')]
    .map((byte) => {
      const ch = String.fromCharCode(byte);
      if (/[A-Za-z0-9\-._~]/.test(ch) || (keepSlash && ch === '/')) return ch;
      return `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
    })
    .join('');
}

interface PresignedRequest {
  method: string;
  url: string;
  /** Headers the request carries (names in any case); Host is taken from the URL. */
  headers: Record<string, string>;
  secretAccessKey: string;
}

/**
 * The signature S3 expects for a presigned request: the signed headers, date, scope and expiry are read from the
 * URL's own query (as S3 does), the rest from the request as it will be sent.
 */
function expectedSignature(request: PresignedRequest): string {
  const url = new URL(request.url);
  const query = [...url.searchParams.entries()].filter(([k]) => k !== 'X-Amz-Signature');
  const param = (name: string) => {
    const found = query.find(([k]) => k === name);
    if (!found) throw new Error(`presigned URL lacks ${name}`);
    return found[1];
  };
  const canonicalQuery = query
    .map(([k, v]) => [uriEncode(k, false), uriEncode(v, false)] as const)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
  const headers = new Map<string, string>([['host', url.host]]);
  for (const [name, value] of Object.entries(request.headers)) headers.set(name.toLowerCase(), value.trim().replace(/\s+/g, ' '));
  const signedHeaders = param('X-Amz-SignedHeaders').split(';');
  const canonicalHeaders = signedHeaders.map((name) => `${name}:${headers.get(name) ?? ''}\n`).join('');
  // S3 object paths are encoded once (no double encoding, unlike other services); decode what the URL holds first.
  const canonicalUri = uriEncode(decodeURIComponent(url.pathname), true);
  const canonicalRequest = [request.method, canonicalUri, canonicalQuery, canonicalHeaders, signedHeaders.join(';'), 'UNSIGNED-PAYLOAD'].join('\n');
  const [, date, region, service, terminal] = param('X-Amz-Credential').split('/');
  const scope = [date, region, service, terminal].join('/');
  const stringToSign = ['AWS4-HMAC-SHA256', param('X-Amz-Date'), scope, sha256(canonicalRequest)].join('\n');
  let key: Buffer = hmac(`AWS4${request.secretAccessKey}`, date!);
  for (const part of [region!, service!, terminal!]) key = hmac(key, part);
  return createHmac('sha256', key).update(stringToSign, 'utf8').digest('hex');
}

describe('the SigV4 verifier of this test', () => {
  it("reproduces AWS's published example (GET examplebucket/test.txt, 2013-05-24, 86400 s)", () => {
    const url =
      'https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256' +
      '&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z' +
      '&X-Amz-Expires=86400&X-Amz-SignedHeaders=host';
    expect(expectedSignature({ method: 'GET', url, headers: {}, secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY' })).toBe(
      'aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404',
    );
  });
});

const SECRET = 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY';

describe.each([
  ['Supabase Storage (https, path prefix)', 'https://project.supabase.co/storage/v1/s3', 'eu-central-1'],
  ['MinIO-style (http, host with port)', 'http://127.0.0.1:9000', 'us-east-1'],
])('presigned S3 upload URL: %s', (_name, endpoint, region) => {
  let t: TestApp;
  let admin: TestUser;
  beforeAll(async () => {
    t = await startTestApp({
      now: '2026-03-04T05:06:07.000Z',
      env: {
        S3_ENDPOINT: endpoint,
        S3_BUCKET: 'media',
        S3_REGION: region,
        S3_ACCESS_KEY_ID: 'AKIDEXAMPLE',
        S3_SECRET_ACCESS_KEY: SECRET,
      },
    });
    admin = await createAdmin(t);
  });
  afterAll(() => t?.close());

  async function presign(json: Record<string, unknown>) {
    const agent = await createAgent(t, admin);
    const res = await t.http.post(`/agents/${agent.id}/uploads`, { cookie: admin.cookie, json });
    expect(res.status, res.text).toBe(201);
    return res.body.data as { uploadUrl: string; publicUrl: string; headers: Record<string, string>; expiresAt: string };
  }

  it('carries a signature S3 accepts for the PUT the browser is told to send, and for nothing else', async () => {
    const data = await presign({ kind: 'video', contentType: 'video/webm', filename: 'tour.webm', sizeBytes: 12345 });
    const url = new URL(data.uploadUrl);
    const provided = url.searchParams.get('X-Amz-Signature');
    const put = { method: 'PUT', url: data.uploadUrl, headers: data.headers, secretAccessKey: SECRET };
    expect(provided).toBe(expectedSignature(put));

    // signed at the service's clock, for the credential scope of the configured region, expiring when it says
    expect(url.searchParams.get('X-Amz-Date')).toBe('20260304T050607Z');
    expect(url.searchParams.get('X-Amz-Credential')).toBe(`AKIDEXAMPLE/20260304/${region}/s3/aws4_request`);
    const expires = Number(url.searchParams.get('X-Amz-Expires'));
    expect(new Date(Date.parse('2026-03-04T05:06:07.000Z') + expires * 1000).toISOString()).toBe(data.expiresAt);
    // the content type and the declared size are part of the signature, so S3 holds the browser to them
    expect(url.searchParams.get('X-Amz-SignedHeaders')!.split(';').sort()).toEqual(['content-length', 'content-type', 'host']);
    expect(data.headers).toEqual({ 'content-type': 'video/webm', 'content-length': '12345' });

    const refused = [
      { ...put, headers: { ...data.headers, 'content-type': 'text/html' } },
      { ...put, headers: { ...data.headers, 'content-length': '123456789' } },
      { ...put, method: 'GET' },
      { ...put, url: data.uploadUrl.replace('tour.webm', 'other.webm') },
      { ...put, url: data.uploadUrl.replace(/X-Amz-Expires=\d+/, 'X-Amz-Expires=604800') },
      { ...put, secretAccessKey: 'another-secret' },
    ];
    for (const request of refused) expect(expectedSignature(request)).not.toBe(provided);
  });
});
