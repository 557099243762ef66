import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startPostgres } from '../postgres-server.ts';
import { createDatabase, startService, stopService, warmedLoad, loadColumns, type LoadFigures } from './lib.ts';

/**
 * `npx tsx scripts/bench/health.ts [seconds] [connections]`: requests/s and latency of GET /health (no
 * dependency) and GET /ready (`select 1`) against the real Node entry (scripts/serve.ts, run as a child
 * process so the load generator does not share its event loop), first on the embedded database, then on a
 * throwaway PostgreSQL server. Figures depend on the machine; they are printed, never asserted.
 */

const seconds = Number(process.argv[2] ?? 5);
const connections = Number(process.argv[3] ?? 32);

interface Figures extends LoadFigures {
  target: string;
  path: string;
}

async function measure(target: string, url: string, path: string): Promise<Figures> {
  return { target, path, ...(await warmedLoad({ url: `${url}${path}` }, connections, seconds)) };
}

async function main() {
  const results: Figures[] = [];

  const dataDir = mkdtempSync(join(tmpdir(), 'mkt-bench-'));
  try {
    const embedded = await startService({ DATABASE_URL: '', DATA_DIR: dataDir });
    try {
      for (const path of ['/health', '/ready']) results.push(await measure('embedded (PGlite)', embedded.url, path));
    } finally {
      await stopService(embedded);
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }

  const server = await startPostgres();
  try {
    const real = await startService({ DATABASE_URL: await createDatabase(server.url, 'bench'), DATA_DIR: mkdtempSync(join(tmpdir(), 'mkt-bench-')) });
    try {
      for (const path of ['/health', '/ready']) results.push(await measure('PostgreSQL 15 server', real.url, path));
    } finally {
      await stopService(real);
    }
  } finally {
    server.stop();
  }

  console.log(`\n${connections} connections, ${seconds} s per run (Node entry, JSON request log on):\n`);
  console.table(
    results.map((r) => ({
      database: r.target,
      path: r.path,
      ...loadColumns(r),
    })),
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
