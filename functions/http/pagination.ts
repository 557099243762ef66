import { z } from '@hono/zod-openapi';
import { sql, type RawBuilder } from '../platform/db.ts';
import { ApiError } from './errors.ts';
import type { Pagination } from './envelope.ts';

/**
 * Keyset pagination over (created_at DESC, id DESC) with opaque cursors signed by the server.
 * A cursor is signed for the list it was issued for (`scope`: the route plus its filters), so a cursor that was
 * altered, truncated or replayed on another list is refused with 400 INVALID_CURSOR. The scope is signed, not carried:
 * a cursor carrying its list's filters grew with the search text, and a 197-character search (or 60 characters of
 * Japanese) made a cursor past the 512 the service accepts, so page 2 of a search the service had answered was refused
 * (found by review 11). A cursor is now about 150 characters whatever the filters.
 */

export const DEFAULT_LIMIT = 20;
export const MAX_LIMIT = 100;

/** `limit`: a positive integer; above 100 it is clamped (not refused). `cursor`: opaque string. */
export const pageQuerySchema = z.object({
  // An empty cursor is the first page: it is what the last page of an empty list hands back, and a client passing
  // back whatever it got must not be refused for it.
  cursor: z
    .string()
    .optional()
    .openapi({ param: { name: 'cursor', in: 'query' }, description: 'Opaque cursor from the previous page (empty: the first page)' }),
  limit: z
    .string()
    .regex(/^[0-9]+$/, 'limit must be a positive integer')
    .transform(Number)
    .refine((n) => n >= 1, 'limit must be at least 1')
    .transform((n) => Math.min(n, MAX_LIMIT))
    .optional()
    .openapi({ param: { name: 'limit', in: 'query' }, type: 'integer', description: 'Page size, default 20, max 100 (clamped)', example: '20' }),
});

/**
 * The query of an admin list (or any admin read with a query): strict, so a key the route does not know is 400
 * VALIDATION_ERROR naming it. Dropped silently, a misspelled filter (`?userid=`) or one the list does not have
 * (`?role=`, `?sort=`) answered the whole unfiltered list as if filtered (review 87). Public routes keep ignoring
 * extra keys: their links are shared with tracking parameters.
 */
export function adminQuery<T extends z.ZodRawShape>(shape: T) {
  return z.object(shape).strict();
}

/** adminQuery of a paginated admin list: cursor and limit plus its filters. */
export function adminPageQuery<T extends z.ZodRawShape>(filters: T) {
  return pageQuerySchema.extend(filters).strict();
}

export interface CursorPosition {
  createdAt: Date;
  id: string;
}

export interface Page {
  limit: number;
  after: CursorPosition | undefined;
  scope: string;
}

interface CursorPayload {
  t: string; // created_at, ISO
  i: string; // id
}

/** Longer than any cursor the service issues (about 150 characters): refused before any work. */
const MAX_CURSOR_LENGTH = 512;

const encoder = new TextEncoder();

export class CursorSigner {
  #key: Promise<CryptoKey>;

  constructor(secret: string) {
    this.#key = crypto.subtle.importKey(
      'raw',
      encoder.encode(`cursor:${secret}`),
      { name: 'HMAC', hash: 'SHA-256' },
      false,
      ['sign', 'verify'],
    );
  }

  async sign(scope: string, position: CursorPosition): Promise<string> {
    const payload: CursorPayload = { t: position.createdAt.toISOString(), i: position.id };
    const body = toBase64Url(encoder.encode(JSON.stringify(payload)));
    const mac = await crypto.subtle.sign('HMAC', await this.#key, signed(scope, body));
    return `${body}.${toBase64Url(new Uint8Array(mac))}`;
  }

  async verify(scope: string, cursor: string): Promise<CursorPosition> {
    const invalid = () => new ApiError('INVALID_CURSOR', 'The cursor is not valid for this list', { cursor: 'invalid' });
    if (cursor.length > MAX_CURSOR_LENGTH) throw invalid();
    const [body, mac, extra] = cursor.split('.');
    if (!body || !mac || extra !== undefined) throw invalid();
    const macBytes = fromBase64Url(mac);
    // Canonical encoding only: base64 ignores the unused low bits of the last character, so without this
    // check a cursor altered in its last character could still verify.
    if (!macBytes || macBytes.length !== 32 || toBase64Url(macBytes) !== mac) throw invalid();
    const valid = await crypto.subtle.verify('HMAC', await this.#key, macBytes, signed(scope, body));
    if (!valid) throw invalid();
    let payload: CursorPayload;
    try {
      payload = JSON.parse(new TextDecoder().decode(fromBase64Url(body) ?? new Uint8Array()));
    } catch {
      throw invalid();
    }
    const createdAt = new Date(payload.t);
    if (typeof payload.i !== 'string' || typeof payload.t !== 'string' || Number.isNaN(createdAt.getTime())) throw invalid();
    return { createdAt, id: payload.i };
  }
}

/** What a cursor's MAC covers: its list and its body (base64url, no newline: the pair reads one way only). */
function signed(scope: string, body: string): Uint8Array<ArrayBuffer> {
  return encoder.encode(`${scope}\n${body}`);
}

/**
 * Resolves the page a request asks for. `scope` must identify the list and every filter that shapes it,
 * e.g. `agents?status=active&tag=ai`.
 */
export async function readPage(
  signer: CursorSigner,
  scope: string,
  query: { cursor?: string | undefined; limit?: number | undefined },
): Promise<Page> {
  return {
    scope,
    limit: query.limit ?? DEFAULT_LIMIT,
    after: query.cursor ? await signer.verify(scope, query.cursor) : undefined,
  };
}

/**
 * SQL condition placing rows after the cursor; `true` on the first page. `alias` qualifies the columns
 * (e.g. `a` for `a.created_at, a.id`). Use with `order by created_at desc, id desc limit ${page.limit + 1}`.
 */
export function afterCursor(page: Page, alias?: string): RawBuilder<unknown> {
  if (!page.after) return sql`true`;
  const createdAt = alias ? sql.ref(`${alias}.created_at`) : sql.ref('created_at');
  const id = alias ? sql.ref(`${alias}.id`) : sql.ref('id');
  return sql`(${createdAt}, ${id}) < (${page.after.createdAt}, ${page.after.id})`;
}

/**
 * Turns the `limit + 1` rows fetched into the page and its pagination object. The cursor points after the
 * last returned item; on the last page it is still present (as the contract says) but leads to an empty page.
 */
export async function finishPage<T extends { createdAt: Date | string; id: string }>(
  signer: CursorSigner,
  page: Page,
  fetched: T[],
): Promise<{ items: T[]; pagination: Pagination }> {
  const hasMore = fetched.length > page.limit;
  const items = hasMore ? fetched.slice(0, page.limit) : fetched;
  const last = items[items.length - 1];
  const cursor = last
    ? await signer.sign(page.scope, { createdAt: new Date(last.createdAt), id: last.id })
    : page.after
      ? await signer.sign(page.scope, page.after)
      : '';
  return { items, pagination: { cursor, hasMore, limit: page.limit } };
}

/** Builds a stable scope string from a list name and its filters (undefined filters left out, keys sorted). */
export function pageScope(list: string, filters: Record<string, string | number | boolean | undefined> = {}): string {
  const parts = Object.keys(filters)
    .filter((k) => filters[k] !== undefined)
    .sort()
    .map((k) => `${k}=${encodeURIComponent(String(filters[k]))}`);
  return parts.length ? `${list}?${parts.join('&')}` : list;
}

function toBase64Url(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function fromBase64Url(text: string): Uint8Array<ArrayBuffer> | undefined {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) return undefined;
  try {
    const bin = atob(text.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (text.length % 4)) % 4));
    return Uint8Array.from(bin, (c) => c.charCodeAt(0));
  } catch {
    return undefined;
  }
}
