import { AwsV4Signer } from 'aws4fetch';
import type { Config } from './config.ts';

/**
 * Object storage for agent images and videos: the API hands out a presigned PUT URL, the browser uploads the
 * file straight to storage, and the public URL is what gets registered (e.g. as an agent video).
 *
 * Two implementations behind one interface:
 *  - S3-compatible (S3_* configured): a SigV4 presigned PUT via aws4fetch, path-style
 *    (`{S3_ENDPOINT}/{bucket}/{key}`), so it works with AWS S3, R2, MinIO and Supabase Storage's S3 endpoint
 *    (`https://<project>.supabase.co/storage/v1/s3`; set S3_PUBLIC_URL to `.../storage/v1/object/public/<bucket>`).
 *    Content-Type and Content-Length (the declared size, always required) are signed, so the upload must match
 *    them: an unsigned Content-Length would let a presigned PUT store an object of any size.
 *  - Local (no S3): the service itself accepts the PUT at `/files/{key}` with an HMAC-signed, expiring query
 *    (content type, declared size as the byte limit, expiry) and serves the file back at `/files/{key}`. The bytes live in a FileStore injected by the Node entry
 *    (disk under `.data/uploads`); the edge has no disk, so without S3 there it is 503 STORAGE_NOT_CONFIGURED.
 */

export interface UploadRequest {
  key: string;
  contentType: string;
  /** The file's declared size, if the caller gave one: S3 signs it as Content-Length (the PUT must send exactly it). */
  sizeBytes?: number | undefined;
  /** The most bytes the upload may hold: the declared size, else the kind's limit. Local storage accepts no more. */
  maxBytes: number;
  now: Date;
  expiresAt: Date;
}

export interface PresignedUpload {
  uploadUrl: string;
  publicUrl: string;
  /** Headers the PUT must carry for the signature to hold. */
  headers: Record<string, string>;
}

export interface ObjectStorage {
  kind: 's3' | 'local';
  presignUpload(request: UploadRequest): Promise<PresignedUpload>;
}

/** Where the local implementation keeps bytes (Node only; injected). */
export interface FileStore {
  /**
   * Streams the body into `key` once, and returns the bytes written. Fails with FileTooLargeError past `maxBytes`,
   * FileSizeError for an empty body or, when `exact`, any size but `maxBytes`, and FileExistsError when the key holds
   * a file already; none of them leaves anything behind.
   */
  write(key: string, body: ReadableStream<Uint8Array>, limit: { maxBytes: number; exact: boolean }): Promise<number>;
  /** Size in bytes, or undefined when there is no such file. */
  size(key: string): Promise<number | undefined>;
  /** The file (or the inclusive byte range `start..end` of it), with the whole file's size. */
  read(
    key: string,
    range?: { start: number; end: number },
  ): Promise<{ body: ReadableStream<Uint8Array>; size: number } | undefined>;
}

/** A body of another size than the upload URL allows: none at all, or not the exact size it was signed for. */
export class FileSizeError extends Error {
  readonly receivedBytes: number;
  readonly expectedBytes: number | undefined;
  constructor(receivedBytes: number, expectedBytes: number | undefined) {
    super(expectedBytes === undefined ? 'empty file' : `file of ${receivedBytes} bytes, ${expectedBytes} expected`);
    this.receivedBytes = receivedBytes;
    this.expectedBytes = expectedBytes;
    this.name = 'FileSizeError';
  }
}

/** The key holds a file already: an upload URL stores its file once. */
export class FileExistsError extends Error {
  constructor() {
    super('the key holds a file already');
    this.name = 'FileExistsError';
  }
}

export class FileTooLargeError extends Error {
  readonly maxBytes: number;
  constructor(maxBytes: number) {
    super(`file larger than ${maxBytes} bytes`);
    this.maxBytes = maxBytes;
    this.name = 'FileTooLargeError';
  }
}

/** Keys the service generates: `agents/<uuid>/<image|video>/<uuid>-<name>.<ext>`. Anything else is refused. */
export const STORAGE_KEY_PATTERN = /^agents\/[0-9a-f-]{36}\/(image|video)\/[0-9a-f-]{36}-[a-z0-9-]{1,80}\.[a-z0-9]{2,5}$/;

export function createStorage(config: Config, fileStore: FileStore | undefined): ObjectStorage | undefined {
  if (config.s3) return s3Storage(config.s3);
  if (fileStore) return new LocalStorage(config.publicBaseUrl, config.authSecret);
  return undefined;
}

type S3Config = NonNullable<Config['s3']>;

const encodeKey = (key: string) => key.split('/').map(encodeURIComponent).join('/');

function amzDate(d: Date): string {
  return d.toISOString().replace(/[:-]|\.\d{3}/g, '');
}

export function s3Storage(s3: S3Config): ObjectStorage {
  return {
    kind: 's3',
    async presignUpload(request) {
      const url = new URL(`${s3.endpoint}/${encodeURIComponent(s3.bucket)}/${encodeKey(request.key)}`);
      // Rounded up: X-Amz-Date is the signing second, so the URL works until expiresAt (a whole second), never less.
      const seconds = Math.max(1, Math.ceil((request.expiresAt.getTime() - request.now.getTime()) / 1000));
      url.searchParams.set('X-Amz-Expires', String(seconds));
      // Without a declared size S3 bounds a presigned PUT only by its own 5 GB (a PUT cannot carry a size range).
      const headers: Record<string, string> = {
        'content-type': request.contentType,
        ...(request.sizeBytes === undefined ? {} : { 'content-length': String(request.sizeBytes) }),
      };
      const signed = await new AwsV4Signer({
        method: 'PUT',
        url: url.toString(),
        headers,
        accessKeyId: s3.accessKeyId,
        secretAccessKey: s3.secretAccessKey,
        service: 's3',
        region: s3.region,
        signQuery: true,
        allHeaders: true,
        datetime: amzDate(request.now),
      }).sign();
      const publicBase = s3.publicUrl ?? `${s3.endpoint}/${encodeURIComponent(s3.bucket)}`;
      return { uploadUrl: signed.url.toString(), publicUrl: `${publicBase}/${encodeKey(request.key)}`, headers };
    },
  };
}

const encoder = new TextEncoder();

function toHex(bytes: ArrayBuffer): string {
  return [...new Uint8Array(bytes)].map((b) => b.toString(16).padStart(2, '0')).join('');
}

/** Signed, expiring upload URLs served by this service (see routes in catalog/routes/files.ts). */
export class LocalStorage implements ObjectStorage {
  readonly kind = 'local' as const;
  #key: Promise<CryptoKey>;

  private readonly publicBaseUrl: string;
  constructor(publicBaseUrl: string, secret: string) {
    this.publicBaseUrl = publicBaseUrl;
    this.#key = crypto.subtle.importKey('raw', encoder.encode(`upload:${secret}`), { name: 'HMAC', hash: 'SHA-256' }, false, [
      'sign',
      'verify',
    ]);
  }

  // `exact`: the size was declared, and the URL takes that size only (review 72: a shorter body, an empty one, was
  // stored). Signed only when set, so a URL issued before the flag existed still verifies as it did.
  #payload(key: string, contentType: string, maxBytes: number, expires: number, exact: boolean): Uint8Array<ArrayBuffer> {
    return encoder.encode(JSON.stringify(exact ? [key, contentType, maxBytes, expires, 'exact'] : [key, contentType, maxBytes, expires]));
  }

  async presignUpload(request: UploadRequest): Promise<PresignedUpload> {
    const expires = Math.floor(request.expiresAt.getTime() / 1000);
    const maxBytes = request.maxBytes;
    const exact = request.sizeBytes !== undefined;
    const sig = toHex(await crypto.subtle.sign('HMAC', await this.#key, this.#payload(request.key, request.contentType, maxBytes, expires, exact)));
    const url = new URL(`${this.publicBaseUrl}/files/${encodeKey(request.key)}`);
    url.searchParams.set('expires', String(expires));
    url.searchParams.set('max', String(maxBytes));
    if (exact) url.searchParams.set('exact', '1');
    url.searchParams.set('sig', sig);
    return {
      uploadUrl: url.toString(),
      publicUrl: `${this.publicBaseUrl}/files/${encodeKey(request.key)}`,
      headers: { 'content-type': request.contentType },
    };
  }

  /** Checks an upload request against its signature; returns the byte limit (exact or not), or a reason to refuse. */
  async verifyUpload(
    key: string,
    contentType: string,
    query: { expires?: string | undefined; max?: string | undefined; exact?: string | undefined; sig?: string | undefined },
    now: Date,
  ): Promise<{ ok: true; maxBytes: number; exact: boolean } | { ok: false; reason: 'invalid' | 'expired' }> {
    const expires = Number(query.expires);
    const maxBytes = Number(query.max);
    if (!Number.isInteger(expires) || !Number.isInteger(maxBytes) || !query.sig || !/^[0-9a-f]{64}$/.test(query.sig)) {
      return { ok: false, reason: 'invalid' };
    }
    const mac = Uint8Array.from(query.sig.match(/../g)!.map((h) => parseInt(h, 16)));
    const exact = query.exact === '1';
    const valid = await crypto.subtle.verify('HMAC', await this.#key, mac, this.#payload(key, contentType, maxBytes, expires, exact));
    if (!valid) return { ok: false, reason: 'invalid' };
    if (now.getTime() > expires * 1000) return { ok: false, reason: 'expired' };
    return { ok: true, maxBytes, exact };
  }
}
