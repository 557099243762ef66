import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { getRequestListener } from '@hono/node-server';
import { failure } from '../http/envelope.ts';
import { isConnectionLost, openPostgres, type Database } from './db.ts';
import type { Config } from './config.ts';
import type { Logger } from './logger.ts';
import { lockEmbeddedDatabase } from './embedded-database-lock.ts';

/**
 * Node-only start-up pieces (never imported by the Deno edge entry): the data directory, the generated
 * AUTH_SECRET, and the choice between a Postgres server and the embedded database.
 */

/**
 * Fills AUTH_SECRET from `<dataDir>/auth-secret` (creating it once) when the environment does not set it, outside
 * production. In production it must come from the environment (loadConfig then refuses to start without it): every
 * instance must hold the same secret, since sessions, cursors and the encrypted signing keys and webhook secrets
 * are readable only with it, and a file per machine gave each replica its own (a session of one was refused by the
 * others, and the token endpoint of one answered 500 on the keys another had encrypted).
 */
export function withPersistedSecret(env: Record<string, string | undefined>): Record<string, string | undefined> {
  if (env.AUTH_SECRET && env.AUTH_SECRET.trim() !== '') return env;
  if (env.NODE_ENV === 'production') return env;
  const dataDir = env.DATA_DIR || '.data';
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, 'auth-secret');
  if (!existsSync(file)) writeFileSync(file, randomBytes(32).toString('base64url'), { mode: 0o600 });
  return { ...env, AUTH_SECRET: readFileSync(file, 'utf8').trim() };
}

/**
 * DATABASE_URL when set, else the embedded database kept in `<dataDir>/pglite`, which one process at a time may open:
 * it is locked (`<dataDir>/pglite.lock`, embedded-database-lock.ts) until closed, and refused (EmbeddedDatabaseInUse)
 * while another process holds it.
 */
export async function openConfiguredDatabase(config: Config): Promise<Database> {
  if (config.databaseUrl) return openPostgres(config.databaseUrl, { max: config.databasePoolSize });
  let openPGlite: typeof import('./pglite.ts').openPGlite;
  try {
    ({ openPGlite } = await import('./pglite.ts'));
  } catch (err) {
    // @electric-sql/pglite is an optional dependency: a server install (`npm ci --omit=dev --omit=optional`)
    // leaves it out and runs on DATABASE_URL.
    if ((err as { code?: string }).code === 'ERR_MODULE_NOT_FOUND') {
      throw new Error('The embedded database needs the optional dependency @electric-sql/pglite (install it, or set DATABASE_URL)', { cause: err });
    }
    throw err;
  }
  const dir = join(config.dataDir, 'pglite');
  mkdirSync(dir, { recursive: true });
  const release = await lockEmbeddedDatabase(join(config.dataDir, 'pglite.lock'));
  try {
    const database = await openPGlite(dir);
    return {
      ...database,
      close: async (options) => {
        try {
          await database.close(options);
        } finally {
          release();
        }
      },
    };
  } catch (err) {
    release();
    throw err;
  }
}

/**
 * The /docs renderer, so /docs renders without internet: Swagger UI's browser bundle vendored in
 * vendor/swagger-ui/ (scripts/vendor-docs.ts copies it from the pinned swagger-ui-dist), followed by a few lines
 * that add its stylesheet to the page (one script, GET /docs/swagger-ui.js). Undefined when those files are
 * missing (the page then loads both from the CDN).
 */
export function localDocsScript(): (() => Promise<Uint8Array>) | undefined {
  const dir = fileURLToPath(new URL('../../vendor/swagger-ui/', import.meta.url));
  const script = join(dir, 'swagger-ui-bundle.js');
  const style = join(dir, 'swagger-ui.css');
  if (!existsSync(script) || !existsSync(style)) return undefined;
  let bytes: Promise<Uint8Array> | undefined;
  const load = async () => {
    const [js, css] = await Promise.all([readFile(script, 'utf8'), readFile(style, 'utf8')]);
    // The stylesheet's source map is not served: its reference is dropped.
    const rules = css.replace(/\/\*# sourceMappingURL=[^*]*\*\//, '');
    const addStyle = `\n;(() => {\n  const style = document.createElement('style');\n  style.textContent = ${JSON.stringify(rules)};\n  document.head.append(style);\n})();\n`;
    return new TextEncoder().encode(js + addStyle);
  };
  return () => (bytes ??= load());
}

/**
 * Keeps the process alive when the database connection drops. postgres.js (3.4.9) leaves some of its own
 * promises without a handler: the array-types query it runs on every new connection (porsager/postgres#1192,
 * #1223, open upstream), and a connection reset under a pooled, reserved connection. When the database
 * restarts, fails over or has a backend terminated, such a promise rejects with nobody listening and Node
 * exits, taking every request in flight with it, although the driver itself recovers (the requests of that
 * moment fail on their own, 503 on /ready, and the next ones reconnect). Those rejections, recognised by a
 * lost-connection error code, are logged as a warning; any other unhandled rejection is logged and ends the
 * process with code 1, as Node's default does.
 */
export function surviveLostDatabaseConnections(logger: Logger): void {
  process.on('unhandledRejection', (reason) => {
    if (isConnectionLost(reason)) {
      logger.warn('database connection lost; the pool reconnects', { err: reason });
      return;
    }
    logger.error('unhandled promise rejection: exiting', { err: reason });
    process.exit(1);
  });
}

/**
 * The HTTP server `npm start` (and every test) serves the app with: @hono/node-server's request listener on a Node
 * server whose every refusal answers the envelope. `defaultHostname` is the host a request without a Host header
 * is taken to name (as the adapter's own `serve` passes its bind address).
 */
export function envelopeHttpServer(
  fetch: (request: Request, env: unknown) => Response | Promise<Response>,
  logger: Logger,
  defaultHostname?: string,
): Server {
  const server = createServer(getRequestListener(fetch, { hostname: defaultHostname, errorHandler: unreadableRequestInEnvelope(logger) }));
  answerRefusedRequestsInEnvelope(server, logger);
  return server;
}

/**
 * What the adapter cannot turn into a Request (a Host header or a request target that is no URL, a backslash in
 * the path) answers 400 in the envelope instead of the adapter's empty 400. The adapter's reason is one of its own
 * fixed sentences (never the request's bytes), so it is safe to repeat and to log. Anything else reaching here was
 * thrown by the app's fetch before it returned a response (Hono's onError answers everything thrown inside a
 * route): a 500 in the envelope, logged.
 */
function unreadableRequestInEnvelope(logger: Logger): (err: unknown) => Response {
  return (err) => {
    const requestId = randomUUID();
    const headers = { 'content-type': 'application/json', 'x-request-id': requestId };
    if (err instanceof Error && err.name === 'RequestError') {
      logger.warn('request refused: its URL cannot be read', { status: 400, reason: err.message, requestId });
      const message = `The request's URL cannot be read (${err.message})`;
      return new Response(JSON.stringify(failure('VALIDATION_ERROR', message, { issues: [{ path: 'request', message }], requestId })), { status: 400, headers });
    }
    logger.error('the app threw before answering', { err, requestId });
    return new Response(JSON.stringify(failure('INTERNAL', 'Internal error', { requestId })), { status: 500, headers });
  };
}

/**
 * What Node's HTTP parser refuses before any handler runs gets the envelope too. Headers past Node's limit
 * (16 KiB, `--max-http-header-size`) answer 431, a request that does not arrive in time (Node's headersTimeout and
 * requestTimeout) 408, anything the
 * parser cannot read (a bad request line, a bad chunk) 400; Node's own answers have no body, so a client that
 * parses every error as the envelope broke on exactly these. Each answer carries a new X-Request-Id, also in the
 * one warning it logs (the parser's error code and the peer's address, never the request's bytes: they may hold
 * a credential). A socket that is already gone is just closed.
 */
function answerRefusedRequestsInEnvelope(server: Server, logger: Logger): void {
  server.on('clientError', (err, socket) => {
    const code = (err as NodeJS.ErrnoException).code;
    // As Node's own handler: nothing is written into a response already under way on this connection (pipelining).
    const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
      socket.destroy();
      return;
    }
    const [status, reason, errorCode, message] =
      code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', 'HEADERS_TOO_LARGE', 'The request headers are over 16 KiB; send fewer or shorter ones']
        : code === 'ERR_HTTP_REQUEST_TIMEOUT' || code === 'HPE_HEADERS_TIMEOUT'
          ? [408, 'Request Timeout', 'REQUEST_TIMEOUT', 'The request did not arrive in time']
          : [400, 'Bad Request', 'VALIDATION_ERROR', 'The request is not valid HTTP/1.1'];
    const requestId = randomUUID();
    const details = errorCode === 'VALIDATION_ERROR' ? { issues: [{ path: 'request', message }], requestId } : { requestId };
    const body = JSON.stringify(failure(errorCode, message, details));
    logger.warn('request refused by the HTTP parser', { status, parserCode: code, remoteAddress: (socket as Socket).remoteAddress, requestId });
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `X-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n${body}`,
    );
  });
}
