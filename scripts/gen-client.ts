import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { clientSchemaSource, SCHEMA_FILE } from '../packages/client/scripts/schema.ts';

/**
 * `npm run gen:client`: starts the service (the Node entry, embedded database in a throwaway directory), reads its
 * /openapi.json, and writes the SDK's types (packages/client/src/schema.d.ts). Run it after changing a route;
 * tests/sdk/schema.once.test.ts fails until you do.
 */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

async function main() {
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'gen-client-'));
  const root = fileURLToPath(new URL('..', import.meta.url));
  const child = spawn(process.execPath, ['scripts/serve.ts'], {
    cwd: root,
    env: { ...process.env, PORT: String(port), DATA_DIR: dataDir, NODE_ENV: 'development', LOG_LEVEL: 'warn' },
    stdio: 'ignore',
  });
  try {
    const base = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 120_000;
    for (;;) {
      const ready = await fetch(`${base}/ready`).then((r) => r.ok, () => false);
      if (ready) break;
      if (Date.now() > deadline) throw new Error('the service did not get ready within 120 s');
      await new Promise((r) => setTimeout(r, 250));
    }
    const document = await (await fetch(`${base}/openapi.json`)).json();
    writeFileSync(SCHEMA_FILE, await clientSchemaSource(document));
    console.log(`wrote ${fileURLToPath(SCHEMA_FILE)}`);
  } finally {
    child.kill();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
