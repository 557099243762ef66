import type { Config } from '../platform/config.ts';
import type { Logger } from '../platform/logger.ts';
import { redactPath } from '../http/request-context.ts';
import { healthRecord } from './record.ts';

/**
 * What the Node entry answers between binding its port and having the application ready (loading the code,
 * creating and migrating the embedded database on a first run): liveness says yes, everything else says
 * "not yet" as 503 UNAVAILABLE with Retry-After, in the usual envelope, with X-Request-Id and a log line.
 * So `npm start` answers /health at once, and /ready turns 200 when the API is really there.
 * Deliberately plain (no Hono, no zod): it must load in milliseconds.
 */
const clientRequestId = /^[\w.:-]{1,128}$/;

export function startingHandler(options: { config: Pick<Config, 'gitSha' | 'releaseVersion'>; logger: Logger; startedAt: Date }) {
  return (request: Request): Response => {
    const started = performance.now();
    const url = new URL(request.url);
    const incoming = request.headers.get('x-request-id');
    const requestId = incoming && clientRequestId.test(incoming) ? incoming : crypto.randomUUID();
    const isHealth = url.pathname === '/health' && (request.method === 'GET' || request.method === 'HEAD');
    const body = isHealth
      ? { status: 'success', data: healthRecord(options.config, options.startedAt, new Date()), error: null }
      : {
          status: 'error',
          data: null,
          error: { code: 'UNAVAILABLE', message: 'The service is starting; try again in a moment', details: { starting: true } },
        };
    const status = isHealth ? 200 : 503;
    const headers: Record<string, string> = { 'Content-Type': 'application/json', 'X-Request-Id': requestId };
    if (!isHealth) headers['Retry-After'] = '1';
    options.logger.info('request', {
      requestId,
      method: request.method,
      route: isHealth ? '/health' : null,
      path: redactPath(url.pathname, isHealth ? '/health' : null),
      status,
      durationMs: Math.round((performance.now() - started) * 100) / 100,
      starting: true,
    });
    return new Response(request.method === 'HEAD' ? null : JSON.stringify(body), { status, headers });
  };
}
