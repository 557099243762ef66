import { spawnSync, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, chmodSync, writeFileSync } from 'node:fs';
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
  /** Kills the postmaster and every backend with SIGKILL (a crash: no shutdown checkpoint, crash recovery on start). */
  crash(): void;
  /** Starts the same cluster again on the same port (after crash(); waits until it accepts connections). */
  start(): void;
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

export interface PostgresServerOptions {
  /** fsync and synchronous commit on (the fault drill's database must survive kill -9); off by default, for speed. */
  durable?: boolean;
  maxConnections?: number;
  /**
   * Server settings (`-c name=value`), e.g. `{ shared_preload_libraries: 'pg_cron', 'cron.database_name': 'app' }`
   * for a cluster that runs pg_cron jobs. Values must not contain spaces.
   */
  settings?: Record<string, string>;
}

export async function startPostgres(options: PostgresServerOptions = {}): Promise<PostgresServer> {
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
    ...Object.entries(options.settings ?? {}).map(([name, value]) => {
      if (/\s/.test(value) || /\s/.test(name)) throw new Error(`postgres setting ${name}: no spaces allowed`);
      return `-c ${name}=${value}`;
    }),
  ].join(' ');
  const start = () => run('pg_ctl', ['-D', dataDir, '-o', settings, '-l', join(dir, 'server.log'), '-w', '-t', '60', 'start']);
  start();
  let stopped = false;
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    port,
    dir,
    start,
    crash() {
      const pidFile = join(dataDir, 'postmaster.pid');
      if (!existsSync(pidFile)) return;
      const postmaster = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
      const children = spawnSync('pgrep', ['-P', String(postmaster)], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean).map(Number);
      for (const pid of [postmaster, ...children]) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      // Wait until the processes are gone, so a start() right after does not meet their shared memory.
      for (const pid of [postmaster, ...children]) {
        for (;;) {
          try {
            process.kill(pid, 0);
          } catch {
            break;
          }
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
        }
      }
    },
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
