import { ApiError } from '../http/errors.ts';
import type { ObjectStorage } from '../platform/storage.ts';
import { slugify } from './tags.ts';

/**
 * Presigned uploads of agent media. The allowed types are what the front end can show inline (no SVG: it can
 * carry script), each kind with its size limit. The object key is generated here (agent, kind, random id,
 * cleaned file name, extension from the content type), never taken from the client as a path. The caller may
 * declare the file's size (`sizeBytes`, within the kind's limit), and the URL is then signed for that size: with S3
 * as the Content-Length the PUT must send, locally as the most the upload accepts. contract.md's body has no size,
 * so it is optional: without it local storage accepts up to the kind's limit, and S3 only its own 5 GB per PUT
 * (a presigned PUT cannot carry a size range), which is why the admin page always sends it.
 */

export const UPLOAD_RULES = {
  image: {
    maxBytes: 10 * 1024 * 1024,
    types: { 'image/png': 'png', 'image/jpeg': 'jpg', 'image/webp': 'webp', 'image/gif': 'gif', 'image/avif': 'avif' },
  },
  video: {
    maxBytes: 500 * 1024 * 1024,
    types: { 'video/mp4': 'mp4', 'video/webm': 'webm', 'video/quicktime': 'mov', 'video/ogg': 'ogv' },
  },
} as const satisfies Record<string, { maxBytes: number; types: Record<string, string> }>;

export const UPLOAD_URL_TTL_MS = 15 * 60 * 1000;

const invalid = (path: string, message: string, extra: Record<string, unknown> = {}) =>
  new ApiError('VALIDATION_ERROR', message, { issues: [{ path, message }], ...extra });

export async function createUpload(
  storage: ObjectStorage | undefined,
  input: { agentId: string; kind: 'image' | 'video'; contentType: string; filename: string; sizeBytes?: number | undefined },
  now: Date,
) {
  if (!storage) {
    throw new ApiError('STORAGE_NOT_CONFIGURED', 'Uploads need object storage: set the S3_* variables', {});
  }
  const rules = UPLOAD_RULES[input.kind];
  const contentType = input.contentType.trim().toLowerCase().split(';')[0]!.trim();
  // Own keys only: `__proto__` or `constructor` found Object.prototype's and were signed as a content type (review 37).
  const ext = Object.hasOwn(rules.types, contentType) ? (rules.types as Record<string, string>)[contentType] : undefined;
  if (!ext) {
    throw invalid('contentType', `contentType must be one of ${Object.keys(rules.types).join(', ')} for a ${input.kind}`, {
      allowed: Object.keys(rules.types),
    });
  }
  // A declared size is signed into the upload URL, so that upload cannot be larger (an S3 presigned PUT without a
  // signed Content-Length accepts objects of any size, up to 5 GB).
  const { sizeBytes } = input;
  if (sizeBytes !== undefined && (!Number.isInteger(sizeBytes) || sizeBytes < 1 || sizeBytes > rules.maxBytes)) {
    throw invalid('sizeBytes', `sizeBytes must be from 1 to ${rules.maxBytes} bytes for a ${input.kind}`, { maxBytes: rules.maxBytes });
  }
  const stem = input.filename.replace(/\.[^.]*$/, '');
  const name = slugify(stem).slice(0, 80).replace(/-+$/, '') || input.kind;
  const key = `agents/${input.agentId}/${input.kind}/${crypto.randomUUID()}-${name}.${ext}`;
  // In whole seconds, as the URL carries it: a URL answered with milliseconds stopped working up to a second before
  // the expiresAt it came with (review 106).
  const expiresAt = new Date(Math.floor((now.getTime() + UPLOAD_URL_TTL_MS) / 1000) * 1000);
  const maxBytes = sizeBytes ?? rules.maxBytes;
  const signed = await storage.presignUpload({ key, contentType, sizeBytes, maxBytes, now, expiresAt });
  return {
    uploadUrl: signed.uploadUrl,
    publicUrl: signed.publicUrl,
    expiresAt: expiresAt.toISOString(),
    method: 'PUT' as const,
    headers: signed.headers,
    maxBytes,
  };
}

/** Content type of a stored file, from the extension the key was given at presign time. */
export function contentTypeOfKey(key: string): string {
  const ext = key.slice(key.lastIndexOf('.') + 1);
  for (const rules of Object.values(UPLOAD_RULES)) {
    for (const [type, e] of Object.entries(rules.types)) if (e === ext) return type;
  }
  return 'application/octet-stream';
}
