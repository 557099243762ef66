import { z } from '@hono/zod-openapi';

/** Free text from a query or path: non-empty and bounded (NUL characters are refused app-wide by http/text-guard.ts). */
export const textParam = (name: string, max: number) => z.string().min(1, `${name} must not be empty`).max(max);
