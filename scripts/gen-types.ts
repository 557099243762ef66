import { writeFileSync } from 'node:fs';
import postgres from 'postgres';
import { openPostgres } from '../functions/platform/db.ts';
import { migrate } from '../functions/platform/migrations.ts';
import { startPostgres } from './postgres-server.ts';
import { generateDatabaseTypes, typesFile } from './supabase-cli.ts';

/**
 * `npm run gen:types`: migrates a throwaway PostgreSQL database and writes the Supabase CLI's TypeScript types
 * of the public schema to supabase/database.types.ts (for supabase-js clients of the public views).
 * Run it after adding or changing a migration; tests/foundation/supabase-cli.pg-only.test.ts fails until you do.
 */
async function main() {
  const server = await startPostgres();
  try {
    const admin = postgres(server.url, { max: 1, onnotice: () => {} });
    await admin.unsafe('create database types');
    await admin.end();
    const url = server.url.replace(/\/postgres$/, '/types');
    const database = openPostgres(url, { max: 1 });
    await migrate(database);
    await database.close();
    writeFileSync(typesFile, await generateDatabaseTypes(url));
    console.log(`wrote ${typesFile}`);
  } finally {
    server.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
