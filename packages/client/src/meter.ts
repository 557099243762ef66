import createClient from 'openapi-fetch';
import { apiErrorOf, NetworkError, type ApiError } from './errors.ts';
import type { components, paths } from './schema.d.ts';

/**
 * Metering for an agent backend: increment, decrement, reserve + commit / release, for one user's access token at
 * this agent. Each call gets a clientReqId (generated unless given) that is reused on every retry, so a retry never
 * counts twice. Retries: network errors and 503 (honouring Retry-After), a bounded number of times, with jitter.
 * Never retried: 429 QUOTA_EXCEEDED (a retry replays it), and any other 4xx. A 401 asks the accessToken function once
 * for a fresh token (`{ rejected }`) and sends the same call again with it. Errors are ApiError subclasses (no answer
 * at all: NetworkError), each carrying the call's clientReqId. An error of the accessToken function itself (a
 * refused refresh) is thrown as it is, never retried: sending a refresh token again can end the user's grant.
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
  /** Retries after the first attempt, for network errors and 503 (default 3). */
  retries?: number;
  /** Upper bound of one wait between attempts before jitter (up to 50 % more), in ms (default 5000). */
  maxDelayMs?: number;
  fetch?: typeof fetch;
}

export function createMeter(options: MeterOptions) {
  const client = createClient<paths>({ baseUrl: options.baseUrl.replace(/\/+$/, ''), ...(options.fetch ? { fetch: options.fetch } : {}) });
  const token = async (request: AccessTokenRequest = {}) =>
    typeof options.accessToken === 'function' ? options.accessToken(request) : options.accessToken;
  const agentId = options.agentId;
  const retries = options.retries ?? 3;
  const maxDelayMs = options.maxDelayMs ?? 5000;

  /** Runs one API call with retries; the call builds the same request (same clientReqId) every time. */
  async function withRetries<T>(send: (headers: Record<string, string>) => Promise<{ data?: unknown; error?: unknown; response: Response }>, clientReqId: string | undefined): Promise<MeterResult<T>> {
    // outside the retries: a token function that fails (a refused refresh) is the caller's error as it is
    let accessToken = await token();
    let renewed = false;
    for (let attempt = 0; ; attempt++) {
      let result: { data?: unknown; error?: unknown; response: Response };
      try {
        result = await send({ authorization: `Bearer ${accessToken}` });
      } catch (err) {
        // no answer: the request may or may not have arrived; the key makes a retry safe
        if (attempt >= retries) throw keyed(new NetworkError(err), clientReqId);
        await sleep(backoff(attempt, undefined, maxDelayMs));
        continue;
      }
      const { response } = result;
      if (response.status === 503 && attempt < retries) {
        await sleep(backoff(attempt, response.headers.get('retry-after'), maxDelayMs));
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
      return {
        data: (result.data as { data: T }).data,
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
        (headers) =>
          client.POST('/me/usage/{agentId}/{metricSlug}/increment', {
            params: { path: { agentId, metricSlug } },
            body: { clientReqId, amount: input.amount ?? 1 },
            headers,
          }),
        clientReqId,
      );
    },

    /** Lowers a fixed metric (floors at 0). */
    decrement(metricSlug: string, input: { amount?: number; clientReqId?: string } = {}): Promise<MeterResult<UsageRecord & { replayed: boolean }>> {
      const clientReqId = input.clientReqId ?? crypto.randomUUID();
      return withRetries(
        (headers) =>
          client.POST('/me/usage/{agentId}/{metricSlug}/decrement', {
            params: { path: { agentId, metricSlug } },
            body: { clientReqId, amount: input.amount ?? 1 },
            headers,
          }),
        clientReqId,
      );
    },

    /** Holds `amount` units until commit, release or `expiresAt` (ttlSeconds, default the service's). */
    reserve(metricSlug: string, input: { amount: number; ttlSeconds?: number; clientReqId?: string }): Promise<MeterResult<Reservation>> {
      const clientReqId = input.clientReqId ?? crypto.randomUUID();
      return withRetries(
        (headers) =>
          client.POST('/me/usage/{agentId}/{metricSlug}/reservations', {
            params: { path: { agentId, metricSlug } },
            body: { clientReqId, amount: input.amount, ...(input.ttlSeconds !== undefined ? { ttlSeconds: input.ttlSeconds } : {}) },
            headers,
          }),
        clientReqId,
      );
    },

    /** Counts what was actually used (0..held) and frees the rest. Repeating the same commit is safe. */
    commit(reservationId: string, amount: number): Promise<MeterResult<Reservation>> {
      return withRetries(
        (headers) =>
          client.POST('/me/usage/{agentId}/reservations/{reservationId}/commit', {
            params: { path: { agentId, reservationId } },
            body: { amount },
            headers,
          }),
        undefined,
      );
    },

    /** Frees every held unit. Repeating it is safe. */
    release(reservationId: string): Promise<MeterResult<Reservation>> {
      return withRetries(
        (headers) =>
          client.POST('/me/usage/{agentId}/reservations/{reservationId}/release', {
            params: { path: { agentId, reservationId } },
            headers,
          }),
        undefined,
      );
    },

    /** The user's usage of one metric (a read: no clientReqId). */
    async usage(metricSlug: string): Promise<UsageRecord> {
      const { data, error, response } = await client.GET('/me/usage/{agentId}/{metricSlug}', {
        params: { path: { agentId, metricSlug } },
        headers: { authorization: `Bearer ${await token()}` },
      });
      if (!response.ok) throw apiErrorOf(response, error);
      return data!.data;
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

/** Exponential from 200 ms, or the server's Retry-After; capped; plus up to 50 % jitter so retries spread out. */
function backoff(attempt: number, retryAfter: string | null | undefined, maxDelayMs: number): number {
  const base = retryAfter && /^\d+$/.test(retryAfter) ? Number(retryAfter) * 1000 : 200 * 2 ** attempt;
  const capped = Math.min(base, maxDelayMs);
  return capped + Math.random() * capped * 0.5;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));


