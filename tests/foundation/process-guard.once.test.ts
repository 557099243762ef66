import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { root } from '../../scripts/supabase-cli.ts';

/**
 * The Node entry's guard against postgres.js's unhandled rejections (functions/platform/node-runtime.ts,
 * surviveLostDatabaseConnections): a dropped driver promise failing with a lost-connection error is logged and
 * the process lives on; any other unhandled rejection still ends it with code 1, logged. Run in a child
 * process, the way scripts/serve.ts installs it.
 */
function runWithGuard(rejection: string): { status: number | null; stdout: string; stderr: string } {
  const script = `
    import { surviveLostDatabaseConnections } from './functions/platform/node-runtime.ts';
    import { createLogger } from './functions/platform/logger.ts';
    surviveLostDatabaseConnections(createLogger());
    Promise.reject(${rejection});
    setTimeout(() => console.log('still alive'), 200);
  `;
  const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: root, encoding: 'utf8', timeout: 60_000 });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

describe('surviveLostDatabaseConnections', () => {
  it('logs a lost connection (ECONNRESET, CONNECTION_CLOSED, 57P01) as a warning and keeps running', () => {
    for (const code of ['ECONNRESET', 'CONNECTION_CLOSED', '57P01']) {
      const run = runWithGuard(`Object.assign(new Error('connection gone'), { code: '${code}' })`);
      expect(run.status, run.stderr).toBe(0);
      expect(run.stdout).toContain('still alive');
      const warning = JSON.parse(run.stderr.split('\n').find((l) => l.includes('database connection lost'))!);
      expect(warning).toMatchObject({ level: 'warn', err: { code } });
    }
  }, 120_000);

  it('ends the process with code 1 on any other unhandled rejection, after logging it', () => {
    const run = runWithGuard(`new TypeError('a real bug')`);
    expect(run.status).toBe(1);
    expect(run.stdout).not.toContain('still alive');
    expect(JSON.parse(run.stderr.split('\n').find((l) => l.includes('unhandled promise rejection'))!)).toMatchObject({
      level: 'error',
      err: { name: 'TypeError', message: 'a real bug' },
    });
  }, 60_000);
});
