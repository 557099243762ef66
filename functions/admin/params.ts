import { z } from '@hono/zod-openapi';

/**
 * Free text from a query or path. PostgreSQL text cannot hold a NUL character (the query would fail with a
 * 500), so it is refused here as bad input, like any other malformed value.
 */
export const textParam = (name: string, max: number) =>
  z
    .string()
    .min(1, `${name} must not be empty`)
    .max(max)
    .refine((v) => !v.includes('\u0000'), `${name} must not contain NUL characters`);
