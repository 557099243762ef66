import { APIError } from '@better-auth/core/error';

/**
 * Input the auth library passes on unchecked, refused before it runs (400 VALIDATION_ERROR, the library's JSON
 * shape) instead of failing in the database as a 500 (found by a review; contract.md: never a 500 for bad input):
 *   * update-user and sign-up: `name` must be a non-empty string of at most 200 characters (null reached a NOT NULL
 *     column), `image` a string or null;
 *   * organization/list-members: `sortBy` and `filterField` name a member field (an unknown one made the adapter
 *     throw), `limit` and `offset` are whole numbers >= 0, and a filter on `createdAt` compares a date;
 *   * the admin endpoints (a platform admin's input, found by a later review): a role is exactly `user` or
 *     `platform_admin` (the library joins a list of roles with commas, which the user_role_known check refused),
 *     a user's `data` names only the user's own fields, each of its type, dates that are dates (the driver threw on
 *     "garbage"), never a new `id` (the sessions and accounts pointing at the old one refused it), and a ban ends
 *     within 100 years (a larger banExpiresIn made no date at all).
 * Called from the library's before hook (better-auth.ts) with the endpoint's path, body and query.
 */
export function refuseBadLibraryInput(path: string, body: unknown, query: unknown): void {
  if (path === '/admin/set-role' && isRecord(body)) refuseUnknownRole('role', body.role);
  if (path === '/admin/create-user' && isRecord(body) && body.role !== undefined) refuseUnknownRole('role', body.role);
  if ((path === '/admin/update-user' || path === '/admin/create-user') && isRecord(body) && body.data !== undefined) {
    if (!isRecord(body.data)) throw invalid('data', 'data must be an object of user fields');
    refuseBadUserData(body.data);
  }
  if (path === '/admin/ban-user' && isRecord(body) && body.banExpiresIn !== undefined && body.banExpiresIn !== null) {
    const seconds = body.banExpiresIn;
    if (typeof seconds !== 'number' || !Number.isInteger(seconds) || seconds < 1 || seconds > MAX_BAN_SECONDS) {
      throw invalid('banExpiresIn', `banExpiresIn must be a whole number of seconds from 1 to ${MAX_BAN_SECONDS} (100 years)`);
    }
  }
  // Sign-up too: it stored "", "   " and a name of 300,000 characters, shown back everywhere (found by a review).
  if ((path === '/update-user' || path === '/sign-up/email') && isRecord(body)) {
    if ((path === '/sign-up/email' || 'name' in body) && !USER_FIELDS.name!(body.name)) {
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

/** The roles of the marketplace (the user_role_known check of migration 20261122000200). */
const USER_ROLES = new Set(['user', 'platform_admin']);
const MAX_BAN_SECONDS = 100 * 365 * 24 * 60 * 60;

function refuseUnknownRole(path: string, role: unknown): void {
  if (typeof role !== 'string' || !USER_ROLES.has(role)) throw invalid(path, 'role must be user or platform_admin');
}

/** What each user field an admin may write holds: the user table's own columns, `id` excepted. */
const USER_FIELDS: Record<string, (value: unknown) => boolean> = {
  name: (v) => typeof v === 'string' && v.trim() !== '' && v.length <= 200,
  email: (v) => typeof v === 'string' && v.length <= 320 && /^[^\s@]+@[^\s@]+$/.test(v),
  emailVerified: (v) => typeof v === 'boolean',
  image: (v) => v === null || typeof v === 'string',
  role: (v) => typeof v === 'string' && USER_ROLES.has(v),
  banned: (v) => v === null || typeof v === 'boolean',
  banReason: (v) => v === null || typeof v === 'string',
  banExpires: (v) => v === null || isDate(v),
  createdAt: isDate,
  updatedAt: isDate,
};

function refuseBadUserData(data: Record<string, unknown>): void {
  for (const [field, value] of Object.entries(data)) {
    const fits = USER_FIELDS[field];
    if (field === 'id') throw invalid('data.id', "a user's id cannot be changed");
    if (!fits) throw invalid(`data.${field}`, `${field} is not a user field (${Object.keys(USER_FIELDS).join(', ')})`);
    if (!fits(value)) throw invalid(`data.${field}`, `${field} has the wrong type or value`);
  }
}

// Date.UTC reads the years 0-99 as 1900-1999, so the first day is spelled out.
const FIRST_DAY = Date.parse('0001-01-01T00:00:00Z');
const AFTER_LAST_DAY = Date.parse('+010000-01-01T00:00:00Z');

/** A date the database can hold: an ISO 8601 string or epoch milliseconds, in the years 1 to 9999. */
function isDate(value: unknown): boolean {
  if (typeof value !== 'string' && typeof value !== 'number') return false;
  const time = new Date(value).getTime();
  return Number.isFinite(time) && time >= FIRST_DAY && time < AFTER_LAST_DAY;
}

/** The member fields the organization plugin can sort and filter on. */
const MEMBER_FIELDS = new Set(['id', 'userId', 'role', 'createdAt']);

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function invalid(path: string, message: string): APIError {
  return new APIError('BAD_REQUEST', { code: 'VALIDATION_ERROR', message, issues: [{ path, message }] });
}
