/**
 * The API's errors as classes an agent backend can branch on (`instanceof QuotaExceededError`). Every error of the
 * envelope becomes an ApiError with the stable `code`; the ones a metering caller must handle have their own class.
 */

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details: Record<string, unknown>;
  /** The service's X-Request-Id: quote it when reporting a problem. */
  readonly requestId: string | undefined;
  /**
   * The clientReqId of the metering call that failed (set by createMeter). After a NetworkError the service may have
   * counted it: send the same call again with this clientReqId, never with a new one.
   */
  clientReqId: string | undefined;
  /**
   * The answer's Retry-After, in seconds (a date is turned into the seconds until it), whatever the status: a 503
   * `UNAVAILABLE` (retry the same call, same clientReqId, after it), a 429 `RATE_LIMITED`, a rolling quota's 429
   * `QUOTA_EXCEEDED` (seconds until it resets). Undefined when the answer had none.
   */
  retryAfterSeconds: number | undefined;
  constructor(
    status: number,
    code: string,
    message: string,
    details: Record<string, unknown>,
    requestId: string | undefined,
    retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.details = details;
    this.requestId = requestId;
    this.retryAfterSeconds = retryAfterSeconds;
  }
  /** Same as `retryAfterSeconds`. */
  get retryAfter(): number | undefined {
    return this.retryAfterSeconds;
  }
}

/** 429 QUOTA_EXCEEDED: nothing was counted. Do not retry; tell the user when the quota resets (`periodEnd`). */
export class QuotaExceededError extends ApiError {
  get metric(): string {
    return this.details.metric as string;
  }
  get used(): number {
    return this.details.used as number;
  }
  get reserved(): number {
    return (this.details.reserved as number) ?? 0;
  }
  get limit(): number | null {
    return this.details.limit as number | null;
  }
  get requested(): number {
    return this.details.requested as number;
  }
  /** When a rolling quota resets; null for a fixed metric (it never resets by itself). */
  get periodEnd(): Date | null {
    return typeof this.details.periodEnd === 'string' ? new Date(this.details.periodEnd) : null;
  }
  /** This 429 is the stored answer of an earlier call with the same clientReqId. */
  get replayed(): boolean {
    return this.details.replayed === true;
  }
  // retryAfterSeconds (alias retryAfter), from ApiError: seconds until the quota resets, when it resets at a known time
}

/** 402 SUBSCRIPTION_REQUIRED: the user has no active subscription to the agent. */
export class SubscriptionRequiredError extends ApiError {}

/** 404 NOT_FOUND: an unknown metric, reservation or agent. */
export class NotFoundError extends ApiError {}

/** 409 IDEMPOTENCY_CONFLICT: the clientReqId was first used for another request (`original`). Nothing changed. */
export class IdempotencyConflictError extends ApiError {
  get original(): Record<string, unknown> | undefined {
    return this.details.original as Record<string, unknown> | undefined;
  }
}

/**
 * No answer from the service after every retry (status 0, code NETWORK_ERROR): the call may or may not have been
 * counted. Its `clientReqId` makes a later retry of the same call safe; `cause` is the last transport error.
 */
export class NetworkError extends ApiError {
  constructor(cause: unknown) {
    super(0, 'NETWORK_ERROR', `No answer from the marketplace: ${(cause as Error)?.message ?? String(cause)}`, {}, undefined);
    this.cause = cause;
  }
}

/** 429 RATE_LIMITED: retry after `retryAfterSeconds` (from ApiError). */
export class RateLimitedError extends ApiError {}

/**
 * The error of a refused answer (status >= 400), as its class. It reads the three shapes docs/errors.md lists: the
 * envelope's `{ status: "error", error: { code, message, details } }`, the auth library's `{ code, message }` and the
 * OAuth endpoints' `{ error, error_description }` (review 114: only the envelope was read, so `invalid_grant`,
 * `invalid_client` and `INVALID_EMAIL_OR_PASSWORD` all came out as `HTTP_<status>`).
 */
export function apiErrorOf(response: Response, body: unknown): ApiError {
  const answer = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const text = (value: unknown) => (typeof value === 'string' && value !== '' ? value : undefined);
  const envelope = typeof answer.error === 'object' && answer.error !== null ? (answer.error as Record<string, unknown>) : undefined;
  const code = text(envelope?.code) ?? text(answer.error) ?? text(answer.code) ?? `HTTP_${response.status}`;
  const message = text(envelope?.message) ?? text(answer.error_description) ?? text(answer.message) ?? response.statusText;
  const details = typeof envelope?.details === 'object' && envelope.details !== null ? (envelope.details as Record<string, unknown>) : {};
  const args = [
    response.status,
    code,
    message,
    details,
    response.headers.get('x-request-id') ?? undefined,
    retryAfterSecondsOf(response.headers),
  ] as const;
  switch (code) {
    case 'QUOTA_EXCEEDED':
      return new QuotaExceededError(...args);
    case 'RATE_LIMITED':
      return new RateLimitedError(...args);
    case 'SUBSCRIPTION_REQUIRED':
      return new SubscriptionRequiredError(...args);
    case 'NOT_FOUND':
      return new NotFoundError(...args);
    case 'IDEMPOTENCY_CONFLICT':
      return new IdempotencyConflictError(...args);
    default:
      return new ApiError(...args);
  }
}

/** Retry-After (RFC 9110 §10.2.3) in seconds: delta-seconds, or an HTTP-date as the seconds until it (0 if past). */
export function retryAfterSecondsOf(headers: Headers): number | undefined {
  const value = headers.get('retry-after')?.trim();
  if (!value) return undefined;
  if (/^\d+$/.test(value)) return Number(value);
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}
