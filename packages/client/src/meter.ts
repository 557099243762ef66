import createClient from 'openapi-fetch';
import { apiErrorOf, NetworkError, retryAfterSecondsOf, type ApiError } from './errors.ts';
import type { components, paths } from './schema.d.ts';

/**
 * Metering for an agent backend: increment, decrement, reserve + commit / release, for one user's access token at
 * this agent, and usage reads. Each write gets a clientReqId (generated unless given) that is reused on every retry, so
 * a retry never counts twice. Every attempt is bounded by timeoutMs. Retries: network errors, attempts timed out, and
 * 502, 503, 504 (honouring Retry-After, up to maxDelayMs), a bounded number of times, with jitter. Never retried:
 * 429 QUOTA_EXCEEDED (a retry replays it), and any other 4xx. A 401 asks the accessToken function once for a fresh
 * token (`{ rejected }`) and sends the same call again with it. All of this holds for usage() too. Errors are ApiError
 * subclasses (no answer at all, or none in time: NetworkError), each carrying the call's clientReqId and the answer's
 * Retry-After (retryAfterSeconds). An error of the accessToken function itself (a refused refresh) is thrown as it
 * is, never retried: sending a refresh token again can end the user's grant.
 */

export type UsageRecord = components['schemas']['UsageRecord'];
export type Reservation = components['schemas']['Reservation'];

export interface Quota {
  /** X-Quota-Limit: the effective quota, null when unlimited. */
  limit: number | null;
  /** X-Quota-Remaining: units left (limit - used - reserved; below 0 after a quota was cut under the usage), null when unlimited. */
  remaining: number | null;
}

export interface MeterResult<T> {
  data: T;
  quota: Quota;
  /** The answer is the stored result of an earlier call with this clientReqId (X-Idempotent-Replay). */
  replayed: boolean;
  clientReqId: string | undefined;
}

export interface AccessTokenRequest {
  /** The token the service just refused with 401 (absent on a first ask). */
  rejected?: string;
}

export interface MeterOptions {
  /** The marketplace's base URL, e.g. https://api.marketplace.example */
  baseUrl: string;
  agentId: string;
  /**
   * The user's access token at this agent, or a function that returns a current one. After a 401 the function is
   * asked once more with `rejected` set to the refused token: refresh and return the new one (or the same one to
   * give up). Refresh one token at a time: createOAuth's refresh shares one request per refresh token.
   */
  accessToken: string | ((request: AccessTokenRequest) => string | Promise<string>);
  /** Retries after the first attempt, for network errors, timeouts and 502, 503, 504 (default 3). */
  retries?: number;
  /**
   * Upper bound of one wait between attempts before jitter (up to 50 % more), in ms (default 5000). It bounds a
   * server's Retry-After too: a longer one is waited for this long (the error still carries the whole Retry-After).
   */
  maxDelayMs?: number;
  /**
   * Longest wait for one attempt's answer (headers and body), in ms (default 10 000). An attempt past it is a network
   * error: retried with the same clientReqId, and a NetworkError once the retries are spent (the call may have been
   * counted). The longest a call can take is about (1 + retries) x timeoutMs plus the waits between attempts.
   */
  timeoutMs?: number;
  fetch?: typeof fetch;
}

export function createMeter(options: MeterOptions) {
  const client = createClient<paths>({ baseUrl: options.baseUrl.replace(/\/+$/, ''), ...(options.fetch ? { fetch: options.fetch } : {}) });
  const token = async (request: AccessTokenRequest = {}) =>
    typeof options.accessToken === 'function' ? options.accessToken(request) : options.accessToken;
  const agentId = options.agentId;
  // Checked here, once: a value read from an unset environment variable (NaN) made `attempt >= retries` never true,
  // so a network failure was retried forever (found by review 08); 0 ms would time every attempt out.
  const retries = option('retries', options.retries, 3, (n) => Number.isInteger(n) && n >= 0, 'a whole number, 0 or more');
  const maxDelayMs = option('maxDelayMs', options.maxDelayMs, 5000, (n) => Number.isFinite(n) && n >= 0, 'a finite number of ms, 0 or more');
  const timeoutMs = option('timeoutMs', options.timeoutMs, 10_000, (n) => Number.isFinite(n) && n > 0, 'a finite number of ms, more than 0');

  /** Runs one API call with retries; the call builds the same request (same clientReqId) every time. */
  async function withRetries<T>(
    send: (headers: Record<string, string>, signal: AbortSignal) => Promise<{ data?: unknown; error?: unknown; response: Response }>,
    clientReqId: string | undefined,
  ): Promise<MeterResult<T>> {
    // outside the retries: a token function that fails (a refused refresh) is the caller's error as it is
    let accessToken = await token();
    let renewed = false;
    for (let attempt = 0; ; attempt++) {
      let result: { data?: unknown; error?: unknown; response: Response };
      try {
        const headers = { authorization: `Bearer ${accessToken}` };
        result = await bounded((signal) => send(headers, signal), timeoutMs);
      } catch (err) {
        // no answer (or none in time): the request may or may not have arrived; the key makes a retry safe
        if (attempt >= retries) throw keyed(new NetworkError(err), clientReqId);
        await sleep(backoff(attempt, undefined, maxDelayMs));
        continue;
      }
      const { response } = result;
      // the service unavailable for now, or a gateway in front of it that lost it (a crashed isolate): the call may
      // or may not have been done, and the same clientReqId makes sending it again safe
      if (RETRIED.has(response.status) && attempt < retries) {
        await sleep(backoff(attempt, retryAfterSecondsOf(response.headers), maxDelayMs));
        continue;
      }
      // a 401 (the token expired early, or the user signed out of the marketplace): once, with a fresh token; the
      // same clientReqId, so nothing counts twice (a renewal is not one of the retries)
      if (response.status === 401 && !renewed && typeof options.accessToken === 'function') {
        renewed = true;
        const fresh = await token({ rejected: accessToken });
        if (fresh !== accessToken) {
          accessToken = fresh;
          attempt -= 1;
          continue;
        }
      }
      if (!response.ok) throw keyed(apiErrorOf(response, result.error), clientReqId);
      // A 2xx that is not the service's answer (a proxy's or a CDN's `200 {}`, a 204, an empty body) says nothing of
      // whether the call was counted: it is a network error, retried with the same clientReqId, never a success
      // (found by review 20: `200 {}` resolved as counted with an unlimited quota, and a 204 threw a bare TypeError).
      const envelope = result.data as { status?: unknown; data?: unknown } | undefined;
      if (envelope?.status !== 'success' || typeof envelope.data !== 'object' || envelope.data === null) {
        const notAnAnswer = new Error(`HTTP ${response.status} without the marketplace's success envelope`);
        if (attempt >= retries) throw keyed(new NetworkError(notAnAnswer), clientReqId);
        await sleep(backoff(attempt, undefined, maxDelayMs));
        continue;
      }
      return {
        data: envelope.data as T,
        quota: quotaOf(response.headers),
        replayed: response.headers.get('x-idempotent-replay') === 'true',
        clientReqId,
      };
    }
  }

  return {
    /** Check and increment (atomic): counts `amount` (default 1) or throws QuotaExceededError with nothing counted. */
    increment(metricSlug: string, input: { amount?: number; clientReqId?: string } = {}): Promise<MeterResult<UsageRecord & { replayed: boolean }>> {
      const clientReqId = input.clientReqId ?? crypto.randomUUID();
      return withRetries(
        (headers, signal) =>
          client.POST('/me/usage/{agentId}/{metricSlug}/increment', {
            params: { path: { agentId, metricSlug } },
            body: { clientReqId, amount: input.amount ?? 1 },
            headers,
            signal,
          }),
        clientReqId,
      );
    },

    /** Lowers a fixed metric (floors at 0). */
    decrement(metricSlug: string, input: { amount?: number; clientReqId?: string } = {}): Promise<MeterResult<UsageRecord & { replayed: boolean }>> {
      const clientReqId = input.clientReqId ?? crypto.randomUUID();
      return withRetries(
        (headers, signal) =>
          client.POST('/me/usage/{agentId}/{metricSlug}/decrement', {
            params: { path: { agentId, metricSlug } },
            body: { clientReqId, amount: input.amount ?? 1 },
            headers,
            signal,
          }),
        clientReqId,
      );
    },

    /** Holds `amount` units until commit, release or `expiresAt` (ttlSeconds, default the service's). */
    reserve(metricSlug: string, input: { amount: number; ttlSeconds?: number; clientReqId?: string }): Promise<MeterResult<Reservation>> {
      const clientReqId = input.clientReqId ?? crypto.randomUUID();
      return withRetries(
        (headers, signal) =>
          client.POST('/me/usage/{agentId}/{metricSlug}/reservations', {
            params: { path: { agentId, metricSlug } },
            body: { clientReqId, amount: input.amount, ...(input.ttlSeconds !== undefined ? { ttlSeconds: input.ttlSeconds } : {}) },
            headers,
            signal,
          }),
        clientReqId,
      );
    },

    /** Counts what was actually used (0..held) and frees the rest. Repeating the same commit is safe. */
    commit(reservationId: string, amount: number): Promise<MeterResult<Reservation>> {
      return withRetries(
        (headers, signal) =>
          client.POST('/me/usage/{agentId}/reservations/{reservationId}/commit', {
            params: { path: { agentId, reservationId } },
            body: { amount },
            headers,
            signal,
          }),
        undefined,
      );
    },

    /** Frees every held unit. Repeating it is safe. */
    release(reservationId: string): Promise<MeterResult<Reservation>> {
      return withRetries(
        (headers, signal) =>
          client.POST('/me/usage/{agentId}/reservations/{reservationId}/release', {
            params: { path: { agentId, reservationId } },
            headers,
            signal,
          }),
        undefined,
      );
    },

    /** The user's usage of one metric (a read: no clientReqId; token renewal, timeout and retries as above). */
    async usage(metricSlug: string): Promise<UsageRecord> {
      const read = await withRetries<UsageRecord>(
        (headers, signal) =>
          client.GET('/me/usage/{agentId}/{metricSlug}', {
            params: { path: { agentId, metricSlug } },
            headers,
            signal,
          }),
        undefined,
      );
      return read.data;
    },
  };
}

export type Meter = ReturnType<typeof createMeter>;

function keyed(err: ApiError, clientReqId: string | undefined): ApiError {
  err.clientReqId = clientReqId;
  return err;
}

function quotaOf(headers: Headers): Quota {
  const read = (name: string) => {
    const v = headers.get(name);
    return v === null || v === 'unlimited' ? null : Number(v);
  };
  return { limit: read('x-quota-limit'), remaining: read('x-quota-remaining') };
}

/** Statuses sent again with the same request: 503 UNAVAILABLE, and a gateway's 502 and 504. Never a 4xx. */
const RETRIED = new Set([502, 503, 504]);

/**
 * One attempt, ended after `ms` with a TimeoutError whatever the fetch does with the signal (a fetch given in the
 * options may ignore it): a server that accepts the connection and never answers, or stops half way through the
 * body, cannot hold the call.
 */
function bounded<T>(attempt: (signal: AbortSignal) => Promise<T>, ms: number): Promise<T> {
  const controller = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  return new Promise<T>((resolve, reject) => {
    timer = setTimeout(() => {
      const reason = new DOMException(`timed out after ${ms} ms`, 'TimeoutError');
      controller.abort(reason);
      reject(reason);
    }, Math.min(ms, 2 ** 31 - 1));
    attempt(controller.signal).then(resolve, reject);
  }).finally(() => clearTimeout(timer));
}

/** Exponential from 200 ms, or the server's Retry-After; capped; plus up to 50 % jitter so retries spread out. */
function backoff(attempt: number, retryAfterSeconds: number | undefined, maxDelayMs: number): number {
  const base = retryAfterSeconds !== undefined ? retryAfterSeconds * 1000 : 200 * 2 ** attempt;
  const capped = Math.min(base, maxDelayMs);
  return capped + Math.random() * capped * 0.5;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** An option as given, else its default; anything the meter cannot bound by is refused when the meter is made. */
function option(name: string, given: number | undefined, fallback: number, valid: (n: number) => boolean, expected: string): number {
  if (given === undefined) return fallback;
  if (typeof given !== 'number' || !valid(given)) throw new TypeError(`createMeter: ${name} must be ${expected} (got ${String(given)})`);
  return given;
}
