import { APIError } from '@better-auth/core/error';
import { breaksLine } from '../platform/text.ts';

/**
 * Input the auth library passes on unchecked, refused before it runs (400 VALIDATION_ERROR, the library's JSON
 * shape) instead of failing in the database as a 500 (found by a review; contract.md: never a 500 for bad input):
 *   * update-user and sign-up: `name` must be a non-empty string of at most 200 characters (null reached a NOT NULL
 *     column), `image` a string or null;
 *   * organization/list-members: `sortBy` and `filterField` name a member field (an unknown one made the adapter
 *     throw), `limit` and `offset` are whole numbers >= 0, a filter on `createdAt` compares a date and matches no
 *     text, `in` and `not_in` take a list (filterValue repeated) and every other operator one value, and a
 *     filterField comes with a filterValue; admin/list-users the same over the user's fields (it answered a query it
 *     could not run with an empty list and a total of 0: review 75), a boolean field filtered by true or false;
 *   * organization/get-full-organization and get-organization: `membersLimit` is a whole number from 1 to 100;
 *   * organization/update: `data` holds only name, slug, logo and metadata, at least one of them;
 *   * the admin endpoints (a platform admin's input, found by a later review): a role is exactly `user` or
 *     `platform_admin` (the library joins a list of roles with commas, which the user_role_known check refused),
 *     a user's `data` names only the user's own fields, each of its type, dates that are dates (the driver threw on
 *     "garbage"), never a new `id` (the sessions and accounts pointing at the old one refused it), and a ban ends
 *     within 100 years (a larger banExpiresIn made no date at all);
 *   * free text the library stores and shows back is bounded (a later review stored 900 KB in each, returned by every
 *     get-session or kept 50 times per account): a user's `image` and an organization's `logo` at most 2,048
 *     characters (a URL), an organization's `name` and `slug` at most 200 and on one line (as a user's name: review
 *     66), its `metadata` at most 4 KiB as JSON and nested at most 5 levels (100,000 levels made the library's
 *     JSON.stringify throw, a 500);
 *     on sign-up, update-user, the admin's create-user and update-user, and organization create and update; an
 *     email address the library stores at most 320 characters (sign-up, create-user, and an organization
 *     invitation, which is also mailed), and a ban's reason at most 1,000 (ban-user, update-user);
 *   * any body nested more than 32 levels deep (the library deep-merges bodies: 20,000 levels overflowed the stack), an
 *     `oauth_query` that is not a string (the OAuth provider reads it from any auth POST), and a user field named
 *     like an Object.prototype member (`__proto__`, `constructor`): each was a 500;
 *   * an admin cannot mark an address verified (create-user, update-user: `data.emailVerified: true`), nor change a
 *     user's address (update-user: `data.email`, 403); an address changed by any other path (SQL) leaves the account
 *     unverified (the trigger of migration 20261126002800).
 * Called from the library's before hook (better-auth.ts) with the endpoint's path, body and query.
 */
export function refuseBadLibraryInput(path: string, body: unknown, query: unknown): void {
  // Before any other check, which would walk the body: the library deep-merges and copies bodies, and a body nested
  // 20,000 deep overflowed the stack (a 500; found by a review). No endpoint of the library reads deeper than a few.
  if (!nestedAtMost(body, MAX_BODY_DEPTH)) throw invalid('body', `the body may be nested at most ${MAX_BODY_DEPTH} levels deep`);
  // The OAuth provider reads `oauth_query` (the signed authorization query) from any auth POST that carries it, with
  // new URLSearchParams: an array or an object there was a TypeError, a 500 (found by a review).
  if (isRecord(body) && body.oauth_query !== undefined && typeof body.oauth_query !== 'string') {
    throw invalid('oauth_query', 'oauth_query must be the query string the authorization server signed');
  }
  // The permission checks look each requested resource up in the role's statements without an own-property test: a
  // resource named like an Object.prototype member (`constructor`, `toString`) found Object's function and threw, a
  // 500 for any signed-in account (review 82). Other unknown resources answer { success: false } as the library does.
  if ((path === '/organization/has-permission' || path === '/admin/has-permission') && isRecord(body)) {
    for (const field of ['permissions', 'permission'] as const) {
      const asked = body[field];
      const inherited = isRecord(asked) ? Object.keys(asked).find((resource) => resource in Object.prototype) : undefined;
      if (inherited !== undefined) throw invalid(field, `${field} names no resource called ${inherited}`);
    }
  }
  // The admin and organization plugins read `userId` with z.coerce.string(): `["<id>"]` (or 7, or null) is read as a
  // user id. Our guards in mount.ts read the body first and take only a string as naming a user, so a list went past
  // the self-demotion check and removed a user without billing's cancellation (review 113). A user id is a string.
  for (const [where, fields] of [['body', body], ['query', query]] as const) {
    if (isRecord(fields) && fields.userId !== undefined && typeof fields.userId !== 'string') throw invalid('userId', `userId in the ${where} must be a string`);
  }
  if (path === '/admin/set-role' && isRecord(body)) refuseUnknownRole('role', body.role);
  if (path === '/admin/create-user' && isRecord(body) && body.role !== undefined) refuseUnknownRole('role', body.role);
  if (path === '/admin/create-user' && isRecord(body) && !USER_FIELDS.name!(body.name)) throw invalid('name', NAME_RULE);
  if ((path === '/admin/update-user' || path === '/admin/create-user') && isRecord(body) && body.data !== undefined) {
    if (!isRecord(body.data)) throw invalid('data', 'data must be an object of user fields');
    refuseBadUserData(body.data);
    // An admin who could write a user's address could write their own mailbox there, ask for a reset link and sign
    // in as the user (review 22; admins never act as users). contract.md has no address change at all (the library's
    // own change-email is closed too); the database's rule for an address written any other way stays (migration
    // 20261126002800: unverified again, its pending reset links ended).
    if (path === '/admin/update-user' && Object.hasOwn(body.data, 'email')) {
      throw new APIError('FORBIDDEN', { code: 'FORBIDDEN', message: "An admin cannot change a user's email address: whoever reads the new address could sign in as them" });
    }
  }
  if (path === '/admin/ban-user' && isRecord(body) && body.banReason !== undefined && !USER_FIELDS.banReason!(body.banReason)) {
    throw invalid('banReason', BAN_REASON_RULE);
  }
  const emailField = EMAIL_FIELDS[path];
  const address = emailField && isRecord(body) ? body[emailField] : undefined;
  if (emailField && typeof address === 'string' && address.length > MAX_EMAIL_LENGTH) {
    throw invalid(emailField, `${emailField} must be at most ${MAX_EMAIL_LENGTH} characters`);
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
      throw invalid('name', NAME_RULE);
    }
    if ('image' in body && !USER_FIELDS.image!(body.image)) throw invalid('image', IMAGE_RULE);
  }
  if (path === '/organization/create' && isRecord(body)) refuseBadOrganization(body, '');
  if (path === '/organization/update' && isRecord(body) && isRecord(body.data)) {
    // The plugin passes any field of `data` on to the update: a createdAt that is no date, or a new id, failed in the
    // database (a 500), and an empty `data` made an UPDATE with nothing to set (a 500 too; found by a review).
    const fields = Object.keys(body.data);
    const other = fields.find((field) => !ORGANIZATION_FIELDS.has(field));
    if (other !== undefined) throw invalid(`data.${other}`, `data may hold only ${[...ORGANIZATION_FIELDS].join(', ')}`);
    if (fields.length === 0) throw invalid('data', `data must hold at least one of ${[...ORGANIZATION_FIELDS].join(', ')}`);
    refuseBadOrganization(body.data, 'data.');
  }
  // get-full-organization's (and get-organization's) membersLimit went into the members' LIMIT as it came: negative or
  // past bigint, PostgreSQL refused it, a 500 (found by a review), also for a stranger to the organization, since the
  // plugin reads the organization before it checks the membership. An organization has at most the plugin's
  // membershipLimit (its default, 100) members, which is also the plugin's default for this limit.
  if ((path === '/organization/get-full-organization' || path === '/organization/get-organization') && isRecord(query)) {
    const limit = query.membersLimit;
    if (limit !== undefined && !(/^\d{1,3}$/.test(String(limit)) && Number(limit) >= 1 && Number(limit) <= MAX_MEMBERS)) {
      throw invalid('membersLimit', `membersLimit must be a whole number from 1 to ${MAX_MEMBERS}`);
    }
  }
  if (path === '/organization/list-members' && isRecord(query)) refuseBadListQuery(query, MEMBER_LIST);
  // The admin's list of users answers any query it cannot run with an empty list and a total of 0 (it catches its own
  // error), so a mistyped sortBy or a negative limit told an admin there were no users at all (review 75).
  if (path === '/admin/list-users' && isRecord(query)) refuseBadListQuery(query, USER_LIST);
}

/** The fields a library list endpoint sorts and filters on, and which of them are dates, text, or true/false. */
interface ListFields {
  fields: Set<string>;
  dates: Set<string>;
  booleans: Set<string>;
}

/** organization/list-members and admin/list-users: a query the library's adapter can run, or a 400 naming what is not. */
function refuseBadListQuery(query: Record<string, unknown>, list: ListFields): void {
  for (const key of ['limit', 'offset'] as const) {
    const value = query[key];
    if (value !== undefined && !/^\d{1,9}$/.test(String(value))) throw invalid(key, `${key} must be a whole number >= 0`);
  }
  for (const key of ['sortBy', 'filterField'] as const) {
    const value = query[key];
    if (value !== undefined && !list.fields.has(String(value))) {
      throw invalid(key, `${key} must be one of ${[...list.fields].join(', ')}`);
    }
  }
  // `in` and `not_in` compare with a list (a single value made the adapter throw "Value must be an array", a 500),
  // every other operator with one value (a list made "role = ('a', 'b')", a 500); a date is not text to match with
  // like (a 500 too). Found by a review.
  const operator = query.filterOperator === undefined ? 'eq' : String(query.filterOperator);
  const values = Array.isArray(query.filterValue) ? query.filterValue : [query.filterValue];
  const field = query.filterField === undefined ? undefined : String(query.filterField);
  // (a filterField without a value filtered on `undefined`: the adapter threw, a 500)
  if (field !== undefined && query.filterValue === undefined) {
    throw invalid('filterValue', 'filterValue must be given with filterField');
  }
  if (query.filterValue !== undefined) {
    if (LIST_OPERATORS.has(operator) !== Array.isArray(query.filterValue)) {
      throw invalid(
        'filterValue',
        LIST_OPERATORS.has(operator)
          ? `filterOperator ${operator} compares with a list: repeat filterValue, once per value`
          : `filterOperator ${operator} compares with one filterValue`,
      );
    }
    if (field !== undefined && list.dates.has(field) && values.some((value) => !isIsoDate(String(value)))) {
      throw invalid('filterValue', `filterValue must be a date (ISO 8601) to filter on ${field}`);
    }
    if (field !== undefined && list.booleans.has(field) && values.some((value) => !['true', 'false'].includes(String(value)))) {
      throw invalid('filterValue', `filterValue must be true or false to filter on ${field}`);
    }
  }
  if (field !== undefined && (list.dates.has(field) || list.booleans.has(field)) && TEXT_OPERATORS.has(operator)) {
    throw invalid('filterOperator', `filterOperator ${operator} matches text; ${field} is not text (eq, ne, lt, lte, gt, gte, in, not_in)`);
  }
}

/**
 * An ISO 8601 date or date-time (2026-11-28, 2026-11-28T10:00:00Z, ...+01:00) both databases read. The library hands
 * the text to the database as typed: Date.parse also took "2020", "1" or "x 1", which the embedded database cannot
 * read as a time, and the plugin's catch answered 200 with no users at all (review 81); so did year 0000 (PostgreSQL
 * has no year 0) and an offset past the 14 hours any zone uses (the embedded database refuses +23:59) (review 85).
 */
function isIsoDate(value: string): boolean {
  const m = /^(\d{4})-(\d{2})-(\d{2})(T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-](\d{2}):(\d{2}))?)?$/.exec(value);
  if (!m || Number.isNaN(Date.parse(value)) || m[1] === '0000') return false;
  if (m[8] !== undefined && (Number(m[8]) > 14 || Number(m[9]) > 59)) return false;
  // a day the month has (Date.parse reads 2026-02-30 as March 2; the database refuses it); setUTCFullYear, since
  // Date.UTC reads years 0-99 as 1900-1999
  const day = new Date(0);
  day.setUTCFullYear(Number(m[1]), Number(m[2]) - 1, Number(m[3]));
  return day.getUTCMonth() === Number(m[2]) - 1 && day.getUTCDate() === Number(m[3]);
}

/** A user's name: shown in mails, pages and the admin's lists. */
export const MAX_NAME_LENGTH = 200;

/** The roles of the marketplace (the user_role_known check of migration 20261122000200). */
const USER_ROLES = new Set(['user', 'platform_admin']);
const MAX_BAN_SECONDS = 100 * 365 * 24 * 60 * 60;

function refuseUnknownRole(path: string, role: unknown): void {
  if (typeof role !== 'string' || !USER_ROLES.has(role)) throw invalid(path, 'role must be user or platform_admin');
}

/** What each user field an admin may write holds: the user table's own columns, `id` excepted. */
const USER_FIELDS: Record<string, (value: unknown) => boolean> = {
  // one line: a name is shown in mails and pages, and line breaks let it write lines of its own there (review 19)
  name: (v) => typeof v === 'string' && v.trim() !== '' && v.length <= MAX_NAME_LENGTH && !breaksLine(v),
  email: (v) => typeof v === 'string' && v.length <= MAX_EMAIL_LENGTH && /^[^\s@]+@[^\s@]+$/.test(v),
  emailVerified: (v) => typeof v === 'boolean',
  image: (v) => v === null || (typeof v === 'string' && v.length <= MAX_URL_LENGTH),
  role: (v) => typeof v === 'string' && USER_ROLES.has(v),
  banned: (v) => v === null || typeof v === 'boolean',
  banReason: (v) => v === null || (typeof v === 'string' && v.length <= MAX_BAN_REASON_LENGTH),
  banExpires: (v) => v === null || isDate(v),
  createdAt: isDate,
  updatedAt: isDate,
};

const NAME_RULE = `name must be a non-empty string of at most ${MAX_NAME_LENGTH} characters, on one line (no control characters)`;

/**
 * An address the library stores (and mails): its own schema checks only the shape, so sign-up stored, and an
 * invitation mailed and listed, an address of 900 KB. 320 characters: a 64-character local part, `@`, a 255-character domain.
 */
const MAX_EMAIL_LENGTH = 320;
/** The body field holding the address each endpoint stores. */
const EMAIL_FIELDS: Record<string, string> = {
  '/sign-up/email': 'email',
  '/admin/create-user': 'email',
  '/organization/invite-member': 'email',
};
/** A ban's reason, shown back to admins with the user: a sentence or a paragraph, not storage. */
const MAX_BAN_REASON_LENGTH = 1000;
const BAN_REASON_RULE = `banReason must be a string of at most ${MAX_BAN_REASON_LENGTH} characters`;
/** An image or logo is a URL; 2,048 characters is the longest URL browsers and servers commonly take. */
const MAX_URL_LENGTH = 2048;
const IMAGE_RULE = `image must be a URL string of at most ${MAX_URL_LENGTH} characters, or null`;
/** An organization's name and slug, as long as a user's name may be. */
const MAX_ORGANIZATION_NAME_LENGTH = MAX_NAME_LENGTH;
/** An organization's metadata: a few settings, not storage. */
const MAX_METADATA_JSON_LENGTH = 4096;
const MAX_METADATA_DEPTH = 5;

/**
 * An organization's text fields (organization/create's body, or organization/update's `data`; `prefix` names where
 * they sit). Non-strings are left to the library's own schema, which refuses them.
 */
function refuseBadOrganization(fields: Record<string, unknown>, prefix: string): void {
  for (const [field, max] of [['name', MAX_ORGANIZATION_NAME_LENGTH], ['slug', MAX_ORGANIZATION_NAME_LENGTH], ['logo', MAX_URL_LENGTH]] as const) {
    const value = fields[field];
    if (typeof value === 'string' && value.length > max) throw invalid(`${prefix}${field}`, `${field} must be at most ${max} characters`);
    // shown in a sentence of the accept-invitation page and in mails, as a user's name is (review 66)
    if (field !== 'logo' && typeof value === 'string' && breaksLine(value)) {
      throw invalid(`${prefix}${field}`, `${field} must be on one line (no control characters)`);
    }
  }
  const metadata = fields.metadata;
  if (metadata === undefined || metadata === null) return;
  // Depth first, without recursion: stringifying a deeply nested value is what overflows the stack.
  if (!nestedAtMost(metadata, MAX_METADATA_DEPTH) || JSON.stringify(metadata).length > MAX_METADATA_JSON_LENGTH) {
    throw invalid(
      `${prefix}metadata`,
      `metadata must be at most ${MAX_METADATA_JSON_LENGTH} characters as JSON, nested at most ${MAX_METADATA_DEPTH} levels`,
    );
  }
}

/** Whether objects and arrays in `value` nest at most `maxDepth` levels (the value itself is level 1), walked with a stack. */
function nestedAtMost(value: unknown, maxDepth: number): boolean {
  const pending: Array<{ value: unknown; depth: number }> = [{ value, depth: 1 }];
  while (pending.length > 0) {
    const next = pending.pop()!;
    if (typeof next.value !== 'object' || next.value === null) continue;
    if (next.depth > maxDepth) return false;
    for (const child of Object.values(next.value)) pending.push({ value: child, depth: next.depth + 1 });
  }
  return true;
}

function refuseBadUserData(data: Record<string, unknown>): void {
  for (const [field, value] of Object.entries(data)) {
    // own keys only: `__proto__` or `constructor` found the object's prototype (a 500, and a pass; found by a review)
    const fits = Object.hasOwn(USER_FIELDS, field) ? USER_FIELDS[field] : undefined;
    if (field === 'id') throw invalid('data.id', "a user's id cannot be changed");
    // Only an address's owner verifies it, by the link mailed to it: a verified address attaches anonymous purchases
    // and accepts invitations made out to it (contract: verified owners), so an admin's word (asked by someone
    // posing as the owner, or a typo) must not stand in for it. False stays allowed: an admin may take it back.
    if (field === 'emailVerified' && value === true) {
      throw invalid('data.emailVerified', 'only the owner of an address can verify it, by the link mailed to it; an admin may set emailVerified to false only');
    }
    if (!fits) throw invalid(`data.${field}`, `${field} is not a user field (${Object.keys(USER_FIELDS).join(', ')})`);
    if (!fits(value)) throw invalid(`data.${field}`, `${field} has the wrong type or value`);
  }
}

const MAX_BODY_DEPTH = 32;

// Date.UTC reads the years 0-99 as 1900-1999, so the first day is spelled out.
const FIRST_DAY = Date.parse('0001-01-01T00:00:00Z');
const AFTER_LAST_DAY = Date.parse('+010000-01-01T00:00:00Z');

/** A date the database can hold: an ISO 8601 string or epoch milliseconds, in the years 1 to 9999. */
function isDate(value: unknown): boolean {
  if (typeof value !== 'string' && typeof value !== 'number') return false;
  const time = new Date(value).getTime();
  return Number.isFinite(time) && time >= FIRST_DAY && time < AFTER_LAST_DAY;
}

/** The organization fields organization/update may write (the plugin's own update schema). */
const ORGANIZATION_FIELDS = new Set(['name', 'slug', 'logo', 'metadata']);
/** The most members an organization has: the plugin's membershipLimit (not configured: its default). */
export const MAX_MEMBERS = 100;
/** list-members' filter operators that compare with a list, and those that match text. */
const LIST_OPERATORS = new Set(['in', 'not_in']);
const TEXT_OPERATORS = new Set(['contains', 'starts_with', 'ends_with']);

/** The member fields the organization plugin can sort and filter on. */
const MEMBER_LIST: ListFields = { fields: new Set(['id', 'userId', 'role', 'createdAt']), dates: new Set(['createdAt']), booleans: new Set() };
/** The user fields the admin plugin's list-users can sort and filter on (the user table's columns). */
const USER_LIST: ListFields = {
  fields: new Set(['id', 'name', 'email', 'emailVerified', 'image', 'role', 'banned', 'banReason', 'banExpires', 'createdAt', 'updatedAt']),
  dates: new Set(['banExpires', 'createdAt', 'updatedAt']),
  booleans: new Set(['emailVerified', 'banned']),
};

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function invalid(path: string, message: string): APIError {
  return new APIError('BAD_REQUEST', { code: 'VALIDATION_ERROR', message, issues: [{ path, message }] });
}
