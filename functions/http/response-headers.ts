import type { Context } from 'hono';
import type { AppEnv } from '../platform/app-types.ts';

/**
 * Sets (or appends) a header on the response already made. Responses built by libraries (fetch results,
 * Better Auth) can have immutable headers: those are copied first.
 */
export function setResponseHeader(c: Context<AppEnv>, name: string, value: string, options: { append?: boolean } = {}): void {
  const apply = (headers: Headers) => (options.append ? headers.append(name, value) : headers.set(name, value));
  try {
    apply(c.res.headers);
  } catch {
    const copy = new Response(c.res.body, c.res);
    apply(copy.headers);
    c.res = copy;
  }
}
