import { copyFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * `npm run gen:docs-vendor`: copies the /docs renderer (Swagger UI's browser bundle and stylesheet, with its
 * licence) from the swagger-ui-dist devDependency into vendor/swagger-ui/, which the Node entry serves as
 * GET /docs/swagger-ui.js. Vendored so a production install (`npm ci --omit=dev`) needs no 12 MB package for
 * two files; tests/foundation/docs.test.ts checks the copies against the pinned integrity hashes, so a version
 * bump without a rerun of this script fails the suite.
 */
const root = fileURLToPath(new URL('..', import.meta.url));
export const docsVendorDir = join(root, 'vendor', 'swagger-ui');
export const docsVendorFiles = ['swagger-ui-bundle.js', 'swagger-ui.css', 'LICENSE', 'NOTICE'] as const;

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const from = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
  mkdirSync(docsVendorDir, { recursive: true });
  for (const file of docsVendorFiles) copyFileSync(join(from, file), join(docsVendorDir, file));
  console.log(`copied ${docsVendorFiles.join(', ')} to ${docsVendorDir}`);
}
