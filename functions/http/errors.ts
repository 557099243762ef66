/**
 * One error type for the whole API. Its `code` is stable API (contract.md section 1) and decides the status.
 * Services throw ApiError; the app's error handler turns it into the envelope.
 */

export const errorStatus = {
  VALIDATION_ERROR: 400,
  INVALID_CURSOR: 400,
  UNAUTHORIZED: 401,
  SUBSCRIPTION_REQUIRED: 402,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  CONFLICT: 409,
  IDEMPOTENCY_CONFLICT: 409,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  METRIC_IN_USE: 422,
  NOT_DECREMENTABLE: 422,
  ONE_CYCLE_NOT_ALLOWED: 422,
  IMMUTABLE_FIELD: 422,
  INVALID_STATE: 422,
  QUOTA_EXCEEDED: 429,
  RATE_LIMITED: 429,
  INTERNAL: 500,
  NOT_IMPLEMENTED: 501,
  PAYMENTS_NOT_CONFIGURED: 503,
  STORAGE_NOT_CONFIGURED: 503,
  UNAVAILABLE: 503,
} as const;

export type ErrorCode = keyof typeof errorStatus;
export type ErrorStatus = (typeof errorStatus)[ErrorCode];

export class ApiError extends Error {
  readonly status: ErrorStatus;
  readonly code: ErrorCode;
  readonly details: Record<string, unknown>;
  /** Extra response headers, e.g. Retry-After. */
  readonly headers: Record<string, string>;
  constructor(code: ErrorCode, message: string, details: Record<string, unknown> = {}, headers: Record<string, string> = {}) {
    super(message);
    this.code = code;
    this.details = details;
    this.headers = headers;
    this.name = 'ApiError';
    this.status = errorStatus[code];
  }
}

export const notFound = (what: string, details: Record<string, unknown> = {}) =>
  new ApiError('NOT_FOUND', `${what} not found`, details);

export const forbidden = (message = 'You do not have access to this resource') => new ApiError('FORBIDDEN', message);

export const conflict = (message: string, details: Record<string, unknown> = {}) =>
  new ApiError('CONFLICT', message, details);

/** Postgres SQLSTATE of an error thrown by either driver, if any. */
export function pgCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** Name of the constraint an integrity error is about (postgres.js: constraint_name; PGlite: constraint). */
export function pgConstraint(error: unknown): string | undefined {
  const e = error as { constraint_name?: unknown; constraint?: unknown } | null;
  const name = e?.constraint_name ?? e?.constraint;
  return typeof name === 'string' ? name : undefined;
}

export const isUniqueViolation = (error: unknown) => pgCode(error) === '23505';
