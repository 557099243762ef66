import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The Deno edge entry resolves bare imports (`hono`, `zod`, ...) through supabase/functions/api/deno.json,
 * which maps each runtime dependency of package.json to `npm:<name>@<exact version>`, plus `<name>/` for
 * subpath imports. Generated from package.json so the two never drift: `npm run gen:edge-imports` rewrites it,
 * and tests/foundation/edge.test.ts fails when it is out of date.
 */

const root = fileURLToPath(new URL('..', import.meta.url));
export const edgeConfigFile = join(root, 'supabase', 'functions', 'api', 'deno.json');

const installOnly = new Set(['patch-package']);

export function expectedEdgeConfig(): string {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  const imports: Record<string, string> = {};
  for (const [name, version] of Object.entries(pkg.dependencies).sort(([a], [b]) => a.localeCompare(b))) {
    // Install-time tools, never imported by the application (patch-package applies patches/ after npm install).
    if (installOnly.has(name)) continue;
    if (!/^\d+\.\d+\.\d+(-[\w.]+)?$/.test(version)) throw new Error(`${name}: pin an exact version in package.json (found ${version})`);
    imports[name] = `npm:${name}@${version}`;
    imports[`${name}/`] = `npm:/${name}@${version}/`;
  }
  const config = {
    // Resolve only through this import map, as the Supabase bundler does (never a node_modules folder).
    nodeModulesDir: 'none',
    imports,
  };
  return `${JSON.stringify(config, null, 2)}\n`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  writeFileSync(edgeConfigFile, expectedEdgeConfig());
  console.log(`wrote ${edgeConfigFile}`);
}
