import { randomNonce } from './html.ts';
import { newRouter } from './router.ts';

/**
 * GET /docs: the interactive API reference (Swagger UI, from the dependency-free `swagger-ui-dist` package)
 * rendered in the browser from /openapi.json.
 * On Node the renderer is served by the service itself (GET /docs/swagger-ui.js: swagger-ui-dist's bundle with
 * its stylesheet, vendored in vendor/swagger-ui/ and read by platform/node-runtime.ts), so the page works without internet
 * access; on the edge, where there is no node_modules, the page loads the same pinned files from the public CDN,
 * checked by Subresource Integrity. URLs in the page are relative, so it also works under a path prefix
 * (Supabase: /functions/v1/api/docs).
 */
export interface DocsOptions {
  /** Bytes of the renderer served as /docs/swagger-ui.js (bundle and stylesheet); absent: load it from the CDN. */
  script?: (() => Promise<Uint8Array>) | undefined;
}

/** The pinned swagger-ui-dist (the devDependency in package.json; tests/foundation/docs.test.ts checks both match). */
export const SWAGGER_UI_VERSION = '5.35.0';
export const SWAGGER_UI_CDN = `https://cdn.jsdelivr.net/npm/swagger-ui-dist@${SWAGGER_UI_VERSION}`;
/** sha384 of swagger-ui-bundle.js and swagger-ui.css of that version (the test checks the package's files and the vendored copies). */
export const SWAGGER_UI_INTEGRITY = {
  'swagger-ui-bundle.js': 'sha384-gjRm0bEPMeTmMh5jT2cHccIwCUZSTd8YC+j0d0sXw0MdGEfScduGpSyF3ZSSLkX9',
  'swagger-ui.css': 'sha384-WlYgdmXYOOBWL5apwjDEZwN+U3HmXSSu5R6V5aGxEcf7z+KuRNwBhoxKVN1i3D5I',
} as const;

const TITLE = 'Agent Marketplace API';

export function docsRoutes(options: DocsOptions) {
  const router = newRouter();
  const local = options.script !== undefined;
  router.get('/docs', (c) => {
    const nonce = randomNonce();
    const assets = local
      ? '  <script src="docs/swagger-ui.js"></script>\n'
      : `  <link rel="stylesheet" href="${SWAGGER_UI_CDN}/swagger-ui.css" integrity="${SWAGGER_UI_INTEGRITY['swagger-ui.css']}" crossorigin="anonymous">\n` +
        `  <script src="${SWAGGER_UI_CDN}/swagger-ui-bundle.js" integrity="${SWAGGER_UI_INTEGRITY['swagger-ui-bundle.js']}" crossorigin="anonymous"></script>\n`;
    const settings = {
      url: 'openapi.json',
      dom_id: '#docs',
      deepLinking: true,
      // Swagger UI would otherwise send the document's URL to validator.swagger.io for a badge.
      validatorUrl: null,
      tryItOutEnabled: false,
      displayRequestDuration: true,
    };
    const html = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>${TITLE}</title>
  <style nonce="${nonce}">body { margin: 0; }</style>
</head>
<body>
  <div id="docs"></div>
${assets}  <script nonce="${nonce}">
    window.ui = SwaggerUIBundle(${JSON.stringify(settings)});
  </script>
</body>
</html>`;
    const origin = local ? "'self'" : new URL(SWAGGER_UI_CDN).origin;
    const csp = [
      `script-src ${origin} 'nonce-${nonce}'`,
      // The bundle adds its stylesheet and Swagger UI sets inline styles.
      `style-src ${origin} 'unsafe-inline'`,
      "img-src 'self' data:",
      "object-src 'none'",
      "frame-ancestors 'none'",
      "base-uri 'none'",
    ].join('; ');
    return c.html(html, 200, { 'content-security-policy': csp, 'x-frame-options': 'DENY', 'referrer-policy': 'no-referrer' });
  });
  if (options.script) {
    const load = options.script;
    router.get('/docs/swagger-ui.js', async (c) => {
      const body = await load();
      return c.body(body as Uint8Array<ArrayBuffer>, 200, {
        'Content-Type': 'text/javascript; charset=utf-8',
        'Cache-Control': 'public, max-age=3600',
      });
    });
  }
  return router;
}
