import { z } from '@hono/zod-openapi';

/** Success and failure envelopes (contract.md section 1) and their OpenAPI schemas. */

export interface Pagination {
  cursor: string;
  hasMore: boolean;
  limit: number;
}

export const ok = <T>(data: T) => ({ status: 'success' as const, data, error: null });

export const okPage = <T>(data: T[], pagination: Pagination) => ({
  status: 'success' as const,
  data,
  pagination,
  error: null,
});

export const failure = (code: string, message: string, details: Record<string, unknown> = {}) => ({
  status: 'error' as const,
  data: null,
  error: { code, message, details },
});

export const paginationSchema = z
  .object({
    cursor: z.string().openapi({ description: 'Opaque; pass back as `cursor` for the next page. Meaningless on the last page.' }),
    hasMore: z.boolean(),
    limit: z.int().openapi({ description: 'The limit actually applied, after clamping to 100.' }),
  })
  .openapi('Pagination');

export const errorBodySchema = z
  .object({
    status: z.literal('error'),
    data: z.null(),
    error: z.object({
      code: z.string().openapi({ example: 'VALIDATION_ERROR' }),
      message: z.string(),
      details: z.record(z.string(), z.unknown()),
    }),
  })
  .openapi('Error');

export function envelopeOf<T extends z.ZodType>(data: T) {
  return z.object({ status: z.literal('success'), data, error: z.null() });
}

export function pageEnvelopeOf<T extends z.ZodType>(item: T) {
  return z.object({ status: z.literal('success'), data: z.array(item), pagination: paginationSchema, error: z.null() });
}
