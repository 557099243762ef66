import { Hono } from 'hono';
import type { AppEnv } from '../../platform/app-types.ts';
import { failure } from '../../http/envelope.ts';
import {
  FileExistsError,
  FileSizeError,
  FileTooLargeError,
  LocalStorage,
  STORAGE_KEY_PATTERN,
  type FileStore,
  type ObjectStorage,
} from '../../platform/storage.ts';
import { contentTypeOfKey } from '../uploads.ts';

/**
 * The local object store's two endpoints (only when no S3 is configured): PUT /files/{key} with the signed
 * query createUpload issued, and GET /files/{key} to read the file back. They stream bodies of up to the
 * upload limit, so this router is mounted before the app's 1 MiB JSON body limit (see app.ts).
 * Not part of the JSON API: the PUT answers the envelope, the GET answers the file.
 */
export function localFileRoutes(objectStorage: ObjectStorage | undefined, files: FileStore | undefined) {
  const router = new Hono<AppEnv>();
  const storage = objectStorage instanceof LocalStorage ? objectStorage : undefined;
  if (!storage || !files) return router;

  router.put('/files/*', async (c) => {
    // Authorized by the signature in the query (issued to an admin by createUpload), not by a session.
    const key = storageKeyOf(c.req.path);
    if (key === undefined) return c.json(failure('NOT_FOUND', 'No such upload location'), 404);
    const contentType = (c.req.header('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
    const verdict = await storage.verifyUpload(key, contentType, c.req.query(), c.var.deps.clock.now());
    if (!verdict.ok) {
      const message =
        verdict.reason === 'expired'
          ? 'The upload URL has expired; ask for a new one'
          : 'The upload URL is not valid for this file (signature, or Content-Type different from the one signed)';
      return c.json(failure('FORBIDDEN', message, { reason: verdict.reason }), 403);
    }
    const declared = Number(c.req.header('content-length') ?? '0');
    if (declared > verdict.maxBytes) {
      return c.json(failure('PAYLOAD_TOO_LARGE', `The file may be at most ${verdict.maxBytes} bytes`, { maxBytes: verdict.maxBytes }), 413);
    }
    // A request with no body reads as an empty one: both are refused by the write (nothing is stored).
    const body = c.req.raw.body ?? new ReadableStream<Uint8Array>({ start: (controller) => controller.close() });
    try {
      const size = await files.write(key, body, verdict);
      return c.json({ status: 'success', data: { key, size }, error: null }, 200);
    } catch (err) {
      if (err instanceof FileTooLargeError) {
        return c.json(failure('PAYLOAD_TOO_LARGE', `The file may be at most ${err.maxBytes} bytes`, { maxBytes: err.maxBytes }), 413);
      }
      if (err instanceof FileSizeError) {
        const message =
          err.expectedBytes === undefined
            ? 'The upload is empty'
            : `The upload is ${err.receivedBytes} bytes; this URL was signed for a file of exactly ${err.expectedBytes} bytes (its sizeBytes)`;
        const details = { issues: [], receivedBytes: err.receivedBytes, ...(err.expectedBytes === undefined ? {} : { expectedBytes: err.expectedBytes }) };
        return c.json(failure('VALIDATION_ERROR', message, details), 400);
      }
      if (err instanceof FileExistsError) {
        return c.json(failure('CONFLICT', 'This upload URL has stored its file already; ask for a new URL to upload another'), 409);
      }
      throw err;
    }
  });

  router.get('/files/*', async (c) => {
    // Public: uploaded media are published assets of the catalog (like a public bucket). Byte ranges are
    // honoured because browsers (Safari in particular) stream <video> with Range requests.
    const key = storageKeyOf(c.req.path);
    const size = key === undefined ? undefined : await files.size(key);
    if (key === undefined || size === undefined) return c.json(failure('NOT_FOUND', 'No such file'), 404);
    const headers: Record<string, string> = {
      'content-type': contentTypeOfKey(key),
      'accept-ranges': 'bytes',
      'cache-control': 'public, max-age=31536000, immutable',
      'x-content-type-options': 'nosniff',
    };
    const range = parseRange(c.req.header('range'), size);
    if (range === 'unsatisfiable') {
      return new Response(null, { status: 416, headers: { ...headers, 'content-range': `bytes */${size}` } });
    }
    const status = range ? 206 : 200;
    if (range) {
      headers['content-length'] = String(range.end - range.start + 1);
      headers['content-range'] = `bytes ${range.start}-${range.end}/${size}`;
    } else {
      headers['content-length'] = String(size);
    }
    // A HEAD gets the GET's headers and no body: nothing is opened for it (review 37: Hono answers a HEAD by running
    // this route and dropping its body unread, which left the file open).
    if (c.req.method === 'HEAD') return new Response(null, { status, headers });
    const file = await files.read(key, range ?? undefined);
    if (!file) return c.json(failure('NOT_FOUND', 'No such file'), 404);
    return new Response(file.body, { status, headers });
  });

  return router;
}

/** One `bytes=a-b`, `bytes=a-` or `bytes=-n` range; anything else (or several ranges) is served whole. */
export function parseRange(header: string | undefined, size: number): { start: number; end: number } | null | 'unsatisfiable' {
  const m = header ? /^bytes=(\d*)-(\d*)$/.exec(header.trim()) : null;
  if (!m || (m[1] === '' && m[2] === '')) return null;
  let start: number;
  let end: number;
  if (m[1] === '') {
    const suffix = Number(m[2]);
    if (suffix === 0) return 'unsatisfiable';
    start = Math.max(0, size - suffix);
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  }
  if (start >= size || start > end) return 'unsatisfiable';
  return { start, end };
}

/** The storage key a /files/ path names, or undefined when it names none (a malformed %-escape included). */
function storageKeyOf(path: string): string | undefined {
  let key: string;
  try {
    key = decodeURIComponent(path.slice('/files/'.length));
  } catch {
    return undefined;
  }
  return STORAGE_KEY_PATTERN.test(key) ? key : undefined;
}
