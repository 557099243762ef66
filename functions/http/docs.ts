import { Scalar } from '@scalar/hono-api-reference';
import type { AppEnv } from './context.ts';
import { newRouter } from './router.ts';

/**
 * GET /docs: the interactive API reference (Scalar) rendered in the browser from /openapi.json.
 * On Node the Scalar script is served by the service itself from the installed @scalar/api-reference bundle
 * (GET /docs/scalar.js), so the page works without internet access; on the edge, where there is no
 * node_modules, the page loads the same script from the public CDN.
 * URLs in the page are relative, so it also works under a path prefix (Supabase: /functions/v1/api/docs).
 */
export interface DocsOptions {
  /** Bytes of @scalar/api-reference's standalone browser bundle; absent: load it from the CDN. */
  script?: (() => Promise<Uint8Array>) | undefined;
}

export function docsRoutes(options: DocsOptions) {
  const router = newRouter();
  router.get(
    '/docs',
    Scalar<AppEnv>({
      url: 'openapi.json',
      pageTitle: 'Agent Marketplace API',
      ...(options.script ? { cdn: 'docs/scalar.js' } : {}),
    }),
  );
  if (options.script) {
    const load = options.script;
    router.get('/docs/scalar.js', async (c) => {
      const body = await load();
      return c.body(body as Uint8Array<ArrayBuffer>, 200, {
        'Content-Type': 'text/javascript; charset=utf-8',
        'Cache-Control': 'public, max-age=3600',
      });
    });
  }
  return router;
}
