import { ConfigError, loadConfig } from '../functions/platform/config.ts';
import { exitIfDatabaseInUse } from '../functions/platform/embedded-database-lock.ts';
import { appliedVersions, loadMigrations, migrate } from '../functions/platform/migrations.ts';
import { openConfiguredDatabase, withPersistedSecret } from '../functions/platform/node-runtime.ts';

/**
 * `npm run migrate`: applies supabase/migrations to DATABASE_URL (or the embedded database in .data/) and
 * records them where the Supabase CLI does, so `supabase db push` later finds nothing to apply.
 * `npm run migrate -- --status` only lists what is applied and what is pending.
 * `npm start` migrates on its own; this is for deploying to a server before the service starts.
 */
async function main() {
  let config;
  try {
    config = loadConfig(withPersistedSecret(process.env));
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
  const database = await openConfiguredDatabase(config);
  try {
    const target = config.databaseUrl ? redact(config.databaseUrl) : `embedded database in ${config.dataDir}/pglite`;
    if (process.argv.includes('--status')) {
      const applied = await appliedVersions(database);
      for (const m of await loadMigrations()) console.log(`${applied.has(m.version) ? 'applied' : 'pending'}  ${m.version}_${m.name}`);
      return;
    }
    const done = await migrate(database, { log: (line) => console.log(line) });
    console.log(done.length ? `${done.length} migration(s) applied to ${target}` : `${target} is up to date`);
  } finally {
    await database.close();
  }
}

function redact(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');
}

main().catch((err) => {
  exitIfDatabaseInUse(err);
  console.error(err);
  process.exit(1);
});
