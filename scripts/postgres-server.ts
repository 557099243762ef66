import { spawnSync, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, chmodSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A throwaway PostgreSQL cluster from the server binaries on this machine (PATH or /usr/lib/postgresql/N/bin),
 * for tests and benchmarks. initdb refuses to run as root, so as root the cluster runs as the `postgres` user.
 */

export interface PostgresServer {
  url: string;
  port: number;
  dir: string;
  stop(): void;
}

export function findPostgresBin(): string | undefined {
  const onPath = spawnSync('sh', ['-c', 'command -v pg_ctl'], { encoding: 'utf8' }).stdout.trim();
  if (onPath && existsSync(onPath.replace(/pg_ctl$/, 'initdb'))) return onPath.replace(/\/pg_ctl$/, '');
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return undefined;
  const versions = readdirSync(base)
    .filter((v) => existsSync(join(base, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] ? join(base, versions[0], 'bin') : undefined;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

export async function startPostgres(options: { durable?: boolean; maxConnections?: number } = {}): Promise<PostgresServer> {
  const bin = findPostgresBin();
  if (!bin) throw new Error('PostgreSQL server binaries not found (install postgresql, or set DATABASE_URL)');
  const isRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(join(tmpdir(), 'mkt-pg-'));
  chmodSync(dir, 0o777);
  const dataDir = join(dir, 'data');
  const run = (cmd: string, args: string[]) => {
    const full = isRoot ? ['-u', 'postgres', '--', join(bin, cmd), ...args] : args;
    const exe = isRoot ? 'runuser' : join(bin, cmd);
    execFileSync(exe, full, { stdio: ['ignore', 'pipe', 'pipe'], cwd: dir });
  };
  const pwFile = join(dir, 'pw');
  writeFileSync(pwFile, 'postgres\n');
  chmodSync(pwFile, 0o644);
  run('initdb', ['-D', dataDir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C', '--pwfile', pwFile]);
  const port = await freePort();
  const settings = [
    `-p ${port}`,
    `-k ${dir}`,
    `-c listen_addresses=127.0.0.1`,
    `-c max_connections=${options.maxConnections ?? 200}`,
    ...(options.durable ? [] : ['-c fsync=off', '-c synchronous_commit=off', '-c full_page_writes=off']),
  ].join(' ');
  run('pg_ctl', ['-D', dataDir, '-o', settings, '-l', join(dir, 'server.log'), '-w', '-t', '60', 'start']);
  let stopped = false;
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    port,
    dir,
    stop() {
      if (stopped) return;
      stopped = true;
      try {
        run('pg_ctl', ['-D', dataDir, '-m', 'immediate', '-w', 'stop']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
