/**
 * Structured JSON logs, one object per line, to stdout (info) and stderr (warn, error).
 * Secrets never go in here: callers log ids, never tokens, passwords or client secrets.
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface Logger {
  log(level: LogLevel, msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

const order: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export function createLogger(options: { level?: LogLevel; write?: (line: string, level: LogLevel) => void } = {}): Logger {
  const min = order[options.level ?? 'info'];
  const write =
    options.write ??
    ((line: string, level: LogLevel) => (level === 'warn' || level === 'error' ? console.error(line) : console.log(line)));
  const log = (level: LogLevel, msg: string, fields: Record<string, unknown> = {}) => {
    if (order[level] < min) return;
    write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields }, errorReplacer), level);
  };
  return {
    log,
    info: (m, f) => log('info', m, f),
    warn: (m, f) => log('warn', m, f),
    error: (m, f) => log('error', m, f),
  };
}

function errorReplacer(_key: string, value: unknown) {
  if (value instanceof Error) {
    return { name: value.name, message: value.message, stack: value.stack, code: (value as { code?: unknown }).code };
  }
  return value;
}

/** A logger that keeps lines in memory: tests read what was logged. */
export function memoryLogger(): Logger & { lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({ level: 'debug', write: (line) => lines.push(JSON.parse(line)) });
  return Object.assign(logger, { lines });
}
