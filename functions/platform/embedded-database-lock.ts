import { closeSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * One process at a time opens the embedded database. PGlite has no lock of its own (the postmaster.pid it writes
 * holds a made-up pid), so `npm run admin-client` beside a running `npm start` opened the same data directory in a
 * second process: two PostgreSQL instances, each with its own buffers, writing the same files (a corruption risk), and
 * the server did not see the new client until it was restarted. Whoever opens it (openConfiguredDatabase in
 * node-runtime.ts: `npm start`, `npm run migrate`, `npm run admin-client`, scripts/seed.ts) first creates the lock file
 * with O_EXCL, holding its pid, and removes it when it closes the database or exits. A lock whose process no longer
 * runs (killed, crashed, the machine restarted) is taken over.
 */

/** What a command refused for it exits with (2 is a configuration error). */
export const DATABASE_IN_USE_EXIT_CODE = 3;

export class EmbeddedDatabaseInUse extends Error {
  readonly lockFile: string;
  readonly pid: number;
  constructor(lockFile: string, pid: number) {
    super(
      `The embedded database in ${dirname(lockFile)} is in use by process ${pid} (the server is running on this data ` +
        `directory, or another command is): stop it first, or run this against DATABASE_URL. (If process ${pid} is ` +
        `something else, its pid reused since, delete the lock ${lockFile}.)`,
    );
    this.name = 'EmbeddedDatabaseInUse';
    this.lockFile = lockFile;
    this.pid = pid;
  }
}

/** Lock files this process holds: its own pid in one of them is no stale lock but a second opening, refused too. */
const held = new Set<string>();

/** Takes the lock or throws EmbeddedDatabaseInUse; resolves to its release (removes the file; safe to call again). */
export async function lockEmbeddedDatabase(file: string): Promise<() => void> {
  const lockFile = resolve(file);
  for (;;) {
    try {
      const fd = openSync(lockFile, 'wx', 0o600);
      try {
        writeSync(fd, String(process.pid));
      } finally {
        closeSync(fd);
      }
      return holdLock(lockFile);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const holder = await holderOf(lockFile);
    if (holder === undefined) continue; // removed meanwhile: try again
    if (holder !== null && (held.has(lockFile) || (holder !== process.pid && isRunning(holder)))) {
      throw new EmbeddedDatabaseInUse(lockFile, holder);
    }
    // Stale: its process is gone (or this process's pid came back after a restart, as in a container). Two processes
    // taking over the same stale lock at the same instant are not told apart; that needs the crash and both starts at once.
    rmSync(lockFile, { force: true });
  }
}

function holdLock(lockFile: string): () => void {
  held.add(lockFile);
  const release = () => {
    process.off('exit', release);
    if (!held.delete(lockFile)) return;
    if (pidIn(lockFile) === process.pid) rmSync(lockFile, { force: true });
  };
  // process.exit() and a crash skip the database's close; the lock goes with the process all the same.
  process.on('exit', release);
  return release;
}

/**
 * The pid in the lock file; null when it holds none (left half-written by a process killed as it took the lock:
 * read again for a moment first, in case its holder is writing it now); undefined when the file is gone.
 */
async function holderOf(lockFile: string): Promise<number | null | undefined> {
  for (let attempt = 0; ; attempt++) {
    const pid = pidIn(lockFile);
    if (pid !== null || attempt === 10) return pid;
    await sleep(50);
  }
}

function pidIn(lockFile: string): number | null | undefined {
  let text: string;
  try {
    text = readFileSync(lockFile, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  const pid = Number(text.trim());
  return Number.isSafeInteger(pid) && pid > 0 ? pid : null;
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'; // running, as another user
  }
}

/** An entry's last word on a refused open: the message alone (no stack) and its exit code. Other errors pass. */
export function exitIfDatabaseInUse(err: unknown): void {
  if (!(err instanceof EmbeddedDatabaseInUse)) return;
  console.error(err.message);
  process.exit(DATABASE_IN_USE_EXIT_CODE);
}
