import { APIError } from '@better-auth/core/error';

/**
 * Input the auth library passes on unchecked, refused before it runs (400 VALIDATION_ERROR, the library's JSON
 * shape) instead of failing in the database as a 500 (found by a review; contract.md: never a 500 for bad input):
 *   * update-user: `name` must be a string (null reached a NOT NULL column), `image` a string or null;
 *   * organization/list-members: `sortBy` and `filterField` name a member field (an unknown one made the adapter
 *     throw), `limit` and `offset` are whole numbers >= 0, and a filter on `createdAt` compares a date.
 * Called from the library's before hook (better-auth.ts) with the endpoint's path, body and query.
 */
export function refuseBadLibraryInput(path: string, body: unknown, query: unknown): void {
  if (path === '/update-user' && isRecord(body)) {
    if ('name' in body && (typeof body.name !== 'string' || body.name.trim() === '' || body.name.length > 200)) {
      throw invalid('name', 'name must be a non-empty string of at most 200 characters');
    }
    if ('image' in body && body.image !== null && typeof body.image !== 'string') throw invalid('image', 'image must be a URL string or null');
  }
  if (path === '/organization/list-members' && isRecord(query)) {
    for (const key of ['limit', 'offset'] as const) {
      const value = query[key];
      if (value !== undefined && !/^\d{1,9}$/.test(String(value))) throw invalid(key, `${key} must be a whole number >= 0`);
    }
    for (const key of ['sortBy', 'filterField'] as const) {
      const value = query[key];
      if (value !== undefined && !MEMBER_FIELDS.has(String(value))) {
        throw invalid(key, `${key} must be one of ${[...MEMBER_FIELDS].join(', ')}`);
      }
    }
    if (query.filterField === 'createdAt' && query.filterValue !== undefined && Number.isNaN(Date.parse(String(query.filterValue)))) {
      throw invalid('filterValue', 'filterValue must be a date (ISO 8601) to filter on createdAt');
    }
  }
}

/** The member fields the organization plugin can sort and filter on. */
const MEMBER_FIELDS = new Set(['id', 'userId', 'role', 'createdAt']);

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function invalid(path: string, message: string): APIError {
  return new APIError('BAD_REQUEST', { code: 'VALIDATION_ERROR', message, issues: [{ path, message }] });
}
