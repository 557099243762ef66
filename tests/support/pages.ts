import { expect } from 'vitest';
import { MAX_LIMIT } from '../../functions/http/pagination.ts';
import type { HttpClient } from './http.ts';

/**
 * The one walker of paginated lists (contract.md section 1, Pagination): follows `pagination.cursor` while
 * `hasMore`, over HTTP, and checks on every page what every list promises: 200, the requested limit echoed
 * (clamped to MAX_LIMIT), a full page whenever there is more, and an end within `maxPages`.
 */
export interface WalkOptions {
  cookie?: string;
  bearer?: string;
  /** Page size (`limit`); the list's default when omitted. */
  limit?: number;
  /** Stop after this many pages even when there is more (to reach page N without walking to the end). */
  pages?: number;
  /** Fail when the list has not ended after this many pages (default 1000). */
  maxPages?: number;
}

export interface Walk<T> {
  items: T[];
  /** Pages fetched. */
  pages: number;
  /** The cursor each page answered with, in order. */
  cursors: string[];
  /** Whether the last page fetched said there is more (only true when stopped by `pages`). */
  hasMore: boolean;
}

export async function walkPages<T = any>(client: { http: HttpClient } | HttpClient, path: string, options: WalkOptions = {}): Promise<Walk<T>> {
  const http = 'http' in client ? client.http : client;
  const items: T[] = [];
  const cursors: string[] = [];
  const maxPages = options.maxPages ?? 1000;
  let cursor: string | undefined;
  for (let pages = 1; pages <= maxPages; pages++) {
    const query = [options.limit !== undefined ? `limit=${options.limit}` : '', cursor ? `cursor=${encodeURIComponent(cursor)}` : ''].filter(Boolean).join('&');
    const url = query ? `${path}${path.includes('?') ? '&' : '?'}${query}` : path;
    const res = await http.get(url, { ...(options.cookie ? { cookie: options.cookie } : {}), ...(options.bearer ? { bearer: options.bearer } : {}) });
    expect(res.status, `${url}: ${res.text}`).toBe(200);
    const { data, pagination } = res.body as { data: T[]; pagination: { cursor: string; hasMore: boolean; limit: number } };
    if (options.limit !== undefined) expect(pagination.limit, url).toBe(Math.min(options.limit, MAX_LIMIT));
    if (pagination.hasMore) expect(data.length, `${url}: a page with more after it is full`).toBe(pagination.limit);
    items.push(...data);
    cursors.push(pagination.cursor);
    if (!pagination.hasMore || pages === options.pages) return { items, pages, cursors, hasMore: pagination.hasMore };
    cursor = pagination.cursor;
  }
  throw new Error(`${path}: pagination did not end within ${maxPages} pages`);
}
