import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The Deno edge entry resolves bare imports (`hono`, `zod`, ...) through supabase/functions/api/deno.json,
 * which maps each runtime dependency of package.json to `npm:<name>@<exact version>`, plus `<name>/` for
 * subpath imports. Generated from package.json so the two never drift: `npm run gen:edge-imports` rewrites it,
 * and tests/foundation/edge.pg-only.test.ts fails when it (or the vendored copy below) is out of date.
 */

const root = fileURLToPath(new URL('..', import.meta.url));
export const edgeConfigFile = join(root, 'supabase', 'functions', 'api', 'deno.json');

const installOnly = new Set(['patch-package']);

/**
 * Packages the edge loads from a copy beside the function instead of `npm:` from the registry: those patches/ changes.
 * Deno fetches `npm:` packages into its own cache, where patch-package never runs, so the edge ran the postgres.js
 * driver unpatched, and a database ending a connection mid-write ended the isolate (review 58;
 * patches/postgres+3.4.9.patch says what the patch mends). The copy is the package's ESM source as npm installed and
 * patched it, its types named by a `@ts-self-types` line, and its bare Node built-in imports (`net`, `os`, ...) mapped
 * to `node:` in the import map.
 */
const vendored = {
  postgres: { dir: 'vendor/postgres', builtins: ['crypto', 'fs', 'net', 'os', 'perf_hooks', 'stream', 'tls'] },
} as const;
const vendorRoot = join(root, 'supabase', 'functions', 'api');

/** The files of the edge's copy of each vendored package: path under supabase/functions/api -> content. */
export function expectedVendoredFiles(): Map<string, string> {
  const files = new Map<string, string>();
  for (const [name, { dir }] of Object.entries(vendored)) {
    const source = join(root, 'node_modules', name);
    for (const file of readdirSync(join(source, 'src')).filter((f) => f.endsWith('.js')).sort()) {
      const text = readFileSync(join(source, 'src', file), 'utf8');
      files.set(`${dir}/src/${file}`, file === 'index.js' ? `// @ts-self-types="../types/index.d.ts"\n${text}` : text);
    }
    // Its types say `export = postgres` (CommonJS style), which Deno reads as no default export from a local file
    // (it bridges that only for npm: packages): the copy exports the same declaration as the default.
    const types = readFileSync(join(source, 'types', 'index.d.ts'), 'utf8');
    if (!types.includes('\nexport = postgres;')) throw new Error(`${name}: its types no longer end in \`export = postgres;\`: look at the copy again`);
    files.set(`${dir}/types/index.d.ts`, types.replace('\nexport = postgres;', '\nexport default postgres;'));
  }
  return files;
}

/** The files of the edge's copy as they are on disk now. */
export function vendoredFilesOnDisk(): Map<string, string> {
  const files = new Map<string, string>();
  for (const { dir } of Object.values(vendored)) {
    for (const sub of ['src', 'types']) {
      let names: string[] = [];
      try {
        names = readdirSync(join(vendorRoot, dir, sub)).sort();
      } catch {
        continue;
      }
      for (const file of names) files.set(`${dir}/${sub}/${file}`, readFileSync(join(vendorRoot, dir, sub, file), 'utf8'));
    }
  }
  return files;
}

export function expectedEdgeConfig(): string {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  const imports: Record<string, string> = {};
  for (const [name, version] of Object.entries(pkg.dependencies).sort(([a], [b]) => a.localeCompare(b))) {
    // Install-time tools, never imported by the application (patch-package applies patches/ after npm install).
    if (installOnly.has(name)) continue;
    if (!/^\d+\.\d+\.\d+(-[\w.]+)?$/.test(version)) throw new Error(`${name}: pin an exact version in package.json (found ${version})`);
    const copy = vendored[name as keyof typeof vendored];
    if (copy) {
      imports[name] = `./${copy.dir}/src/index.js`;
      for (const builtin of copy.builtins) imports[builtin] = `node:${builtin}`;
      continue;
    }
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
  for (const { dir } of Object.values(vendored)) rmSync(join(vendorRoot, dir), { recursive: true, force: true });
  for (const [path, text] of expectedVendoredFiles()) {
    mkdirSync(join(vendorRoot, path, '..'), { recursive: true });
    writeFileSync(join(vendorRoot, path), text);
  }
  console.log(`wrote ${expectedVendoredFiles().size} files under ${join(vendorRoot, 'vendor')}`);
}
