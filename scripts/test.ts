import { spawn } from 'node:child_process';
import { delimiter, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findPostgresBin, startPostgres, type PostgresServer } from './postgres-server.ts';

/**
 * `npm test`: the whole suite against a real PostgreSQL server and against the embedded PGlite.
 * The server is DATABASE_URL when set (it must allow CREATE DATABASE), else a throwaway cluster started from
 * the PostgreSQL binaries on this machine. With neither, the real-server tier is skipped and that is said
 * loudly (CI installs PostgreSQL so it always runs there). Extra arguments go to vitest
 * (e.g. `npm test -- tests/health.test.ts`); TEST_TIERS=postgres or =pglite runs one tier.
 *
 * Node: vitest and its workers run on the Node that runs this script (`npm test`: Node 24 from the `node`
 * devDependency, first on PATH in npm scripts), and that Node's directory leads PATH for the tests, so the
 * processes they spawn (`node`, tsx, npm) run on it too.
 */
async function main() {
  const major = Number(process.versions.node.split('.')[0]);
  console.log(`node ${process.version} (${process.execPath})`);
  if (major < 24) console.warn(`Node ${process.version}: the project targets Node 24 (package.json engines); run it through \`npm test\` after \`npm install\``);
  const args = process.argv.slice(2);
  const tiers = (process.env.TEST_TIERS ?? 'postgres,pglite').split(',').map((t) => t.trim());
  let server: PostgresServer | undefined;
  let pgUrl = process.env.DATABASE_URL;
  const projects: string[] = [];

  if (tiers.includes('postgres')) {
    if (!pgUrl && findPostgresBin()) {
      server = await startPostgres();
      pgUrl = server.url;
    }
    if (pgUrl) {
      console.log(`real PostgreSQL tier: running against ${redact(pgUrl)}${server ? ' (throwaway cluster)' : ''}`);
      projects.push('postgres');
    } else {
      console.warn('real PostgreSQL tier: SKIPPED (no DATABASE_URL and no PostgreSQL binaries found)');
      if (process.env.CI) {
        console.error('CI must run the real PostgreSQL tier');
        process.exit(1);
      }
    }
  }
  if (tiers.includes('pglite')) projects.push('pglite');

  const vitest = fileURLToPath(new URL('../node_modules/vitest/vitest.mjs', import.meta.url));
  const code = await run(process.execPath, [vitest, 'run', ...projects.flatMap((p) => ['--project', p]), ...args], {
    ...process.env,
    PATH: [dirname(process.execPath), process.env.PATH].filter(Boolean).join(delimiter),
    ...(pgUrl ? { TEST_PG_URL: pgUrl } : {}),
    DATABASE_URL: '',
  });
  server?.stop();
  process.exit(code);
}

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: 'inherit', env });
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });
}

function redact(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
