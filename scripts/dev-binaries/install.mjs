// Installs the dev tools named under "binaries" in package.json (deno, supabase, typescript 7) into
// <project>/node_modules/.dev-binaries, for this machine's platform only.
//
// Why not plain devDependencies: each package ships one optional dependency per platform
// (@deno/darwin-arm64, @supabase/cli-linux-x64, @typescript/typescript-linux-x64, ...). A lockfile written where some of those are unavailable
// lacks their entries, and `npm ci` then refuses the lockfile everywhere. Installed here, by this package's
// install script, they never enter the project's lockfile; versions are pinned exactly in package.json.
// node_modules/.bin/deno, node_modules/.bin/supabase and node_modules/.bin/tsgo are this package's shims (bin/),
// which exec them. TypeScript 7 (the compiler ported to Go) type-checks the project in about a fifth of 5.9's time;
// its `tsc` is shimmed as `tsgo` because the typescript@5.9 devDependency stays: openapi-typescript and the Stripe
// fake's spec check use its JavaScript API, which TypeScript 7 does not have.
//
// The project's `npm install` / `npm ci` runs this (the package is a devDependency, `file:scripts/dev-binaries`);
// `npm ci --omit=dev` does not. Idempotent: nothing is fetched when the pinned versions are already there.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
// scripts/dev-binaries (linked) or node_modules/dev-binaries (copied): the project root is two levels up.
const root = resolve(here, '..', '..');
const target = join(root, 'node_modules', '.dev-binaries');
const { binaries } = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8'));

const installed = (name) => {
  const file = join(target, 'node_modules', name, 'package.json');
  return existsSync(file) && JSON.parse(readFileSync(file, 'utf8')).version === binaries[name];
};

/** The commands an installed package puts in node_modules/.bin (typescript's is `tsc`, not its own name). */
const commandsOf = (name) => {
  const { bin } = JSON.parse(readFileSync(join(target, 'node_modules', name, 'package.json'), 'utf8'));
  return typeof bin === 'string' ? [name] : Object.keys(bin ?? {});
};

if (Object.keys(binaries).every(installed) && Object.keys(binaries).flatMap(commandsOf).every((command) => existsSync(join(target, 'node_modules', '.bin', command)))) {
  process.exit(0);
}

mkdirSync(target, { recursive: true });
const manifest = {
  name: 'dev-binaries-install',
  private: true,
  description: 'Written by scripts/dev-binaries/install.mjs; do not edit.',
  dependencies: binaries,
  // deno's postinstall links its platform binary in place of the JavaScript launcher.
  allowScripts: { deno: true },
};
writeFileSync(join(target, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
console.log(`dev-binaries: installing ${Object.entries(binaries).map(([n, v]) => `${n}@${v}`).join(', ')} for ${process.platform}-${process.arch}`);
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const result = spawnSync(npm, ['install', '--no-package-lock', '--no-audit', '--no-fund', '--include=optional', '--loglevel=error'], {
  cwd: target,
  stdio: 'inherit',
  shell: process.platform === 'win32',
  env: { ...process.env, npm_config_global: 'false', npm_config_omit: '', npm_config_package_lock: 'false' },
});
if (result.status !== 0) {
  console.error(`dev-binaries: npm install in ${target} failed`);
  process.exit(result.status ?? 1);
}
