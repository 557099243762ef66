/**
 * Structured JSON logs, one object per line, to stdout (info) and stderr (warn, error).
 *
 * Secrets never go in here (contract.md, Trust boundaries: no password, reset or verification token, client
 * secret, session token or access token, also not inside a logged URL). Callers log ids, never credentials, and
 * the request log redacts URLs itself (http/request-context.ts). As a second line of defense the logger refuses
 * obvious secrets on its own, whatever a caller (or a library's log hook) hands it:
 * - a field whose name says it holds one (password, token, secret, authorization, cookie, ...) is written as
 *   `[redacted]`, at any depth;
 * - inside any string: JWTs, `Bearer` credentials, session-cookie values, secret-named URL query
 *   parameters (`token=`, `code=`, `client_secret=`, ...) and the token segment of a password-reset link are
 *   replaced by `[redacted]`.
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface Logger {
  log(level: LogLevel, msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

const order: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export const REDACTED = '[redacted]';

export function createLogger(options: { level?: LogLevel; write?: (line: string, level: LogLevel) => void } = {}): Logger {
  const min = order[options.level ?? 'info'];
  const write =
    options.write ??
    ((line: string, level: LogLevel) => (level === 'warn' || level === 'error' ? console.error(line) : console.log(line)));
  const log = (level: LogLevel, msg: string, fields: Record<string, unknown> = {}) => {
    if (order[level] < min) return;
    const line: Record<string, unknown> = { time: new Date().toISOString(), level, msg: scrubSecrets(msg) };
    for (const key in fields) line[key] = safeValue(key, fields[key], 0);
    write(JSON.stringify(line), level);
  };
  return {
    log,
    info: (m, f) => log('info', m, f),
    warn: (m, f) => log('warn', m, f),
    error: (m, f) => log('error', m, f),
  };
}

/** Field names that hold credentials (camelCase, snake_case and header spellings alike). */
const secretFieldName =
  /password|passwd|passphrase|secret|token|authorization|cookie|api[-_]?key|credential|private[-_]?key|signature|code[-_]?verifier|^otp$/i;

/**
 * Secrets recognisable by their shape inside any string. Every alternative keeps its prefix (group 1) and drops
 * the secret. One pass with one expression: the request line goes through here on every request.
 */
const secretInText = new RegExp(
  [
    // a JWT (header and payload are base64url JSON objects: `eyJ`)
    String.raw`()eyJ[\w-]{4,}\.eyJ[\w-]{4,}\.[\w-]*`,
    // a bearer credential (Basic ones travel in `authorization` fields, redacted by name)
    String.raw`(\bBearer\s+)[\w.~+/=-]{16,}`,
    // a session cookie's value
    String.raw`(session_token=)[^;,\s"]+`,
    // a secret-named parameter (`token=...`) in a URL query, a form body or a message
    String.raw`((?:^|[^\w-])(?:token|code|consent_code|state|client_secret|refresh_token|access_token|id_token|id_token_hint|password|new_?password|current_?password|code_verifier|session_token)=)[^&#\s"]+`,
    // the token in a password-reset link (`/reset-password/<token>`), not a route pattern (`:token`)
    String.raw`(\/reset-password\/)(?!:)[^/?#\s"]+`,
  ].join('|'),
  'gi',
);

/** A string with every recognisable secret replaced by `[redacted]`. */
export function scrubSecrets(text: string): string {
  // Cheap first look (every request line passes here): each pattern needs one of these.
  if (text.length < 8 || !(text.includes('=') || text.includes('eyJ') || text.includes('Bearer') || text.includes('reset-password/'))) {
    return text;
  }
  secretInText.lastIndex = 0;
  if (!secretInText.test(text)) return text;
  secretInText.lastIndex = 0;
  return text.replace(secretInText, (_match, ...groups: unknown[]) => {
    const prefix = groups.slice(0, 5).find((g) => typeof g === 'string' && g !== '') as string | undefined;
    return `${prefix ?? ''}${REDACTED}`;
  });
}

/** Field names repeat (the request line has the same ten on every request): the verdict is remembered. */
const fieldVerdicts = new Map<string, boolean>();
function isSecretFieldName(key: string): boolean {
  let secret = fieldVerdicts.get(key);
  if (secret === undefined) {
    secret = secretFieldName.test(key);
    if (fieldVerdicts.size < 1000) fieldVerdicts.set(key, secret);
  }
  return secret;
}

/** The value as it may be logged: secret-named fields redacted, strings scrubbed, errors as plain objects. */
function safeValue(key: string, value: unknown, depth: number): unknown {
  if (value === null || value === undefined || typeof value === 'number' || typeof value === 'boolean') return value;
  if (key !== '' && isSecretFieldName(key)) return REDACTED;
  if (typeof value === 'string') return scrubSecrets(value);
  if (typeof value !== 'object') return typeof value === 'bigint' ? String(value) : undefined;
  if (depth > 8) return '[too deep]';
  if (value instanceof Error) {
    const err = value as Error & { code?: unknown; cause?: unknown };
    return safeValue('', { name: err.name, message: err.message, stack: err.stack, code: err.code }, depth + 1);
  }
  // Dates, URLs, buffers...: what JSON.stringify would write for them.
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    return safeValue(key, (value as { toJSON: () => unknown }).toJSON(), depth + 1);
  }
  if (Array.isArray(value)) return value.map((item) => safeValue('', item, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = safeValue(k, v, depth + 1);
  return out;
}

/** A logger that keeps lines in memory: tests read what was logged. */
export function memoryLogger(): Logger & { lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({ level: 'debug', write: (line) => lines.push(JSON.parse(line)) });
  return Object.assign(logger, { lines });
}
