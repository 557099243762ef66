import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root } from '../../scripts/supabase-cli.ts';

/**
 * The whole project (application, scripts, tests) compiles under `strict` TypeScript. Vitest and tsx strip
 * types without checking them, so without this a type error would only show in an editor. It needs no database,
 * so it runs once (`.once`: in the pglite project only; see vitest.config.ts). The checker is TypeScript 7
 * (`tsgo`, scripts/dev-binaries): about 6 s against 27 s for TypeScript 5.9 on this 2-core machine, and 50 s of
 * the CI run's 15 minutes under load.
 */
describe('npm run typecheck', () => {
  it('finds no type errors', () => {
    const tsc = spawnSync(join(root, 'node_modules', '.bin', 'tsgo'), ['--noEmit', '-p', root], { cwd: root, encoding: 'utf8' });
    expect(tsc.stdout + tsc.stderr).toBe('');
    expect(tsc.status).toBe(0);
  }, 120_000);
});
