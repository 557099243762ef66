import { getMigrations } from 'better-auth/db/migration';
import { authOptions } from '../functions/auth/better-auth.ts';
import { systemClock } from '../functions/platform/clock.ts';
import { loadConfig } from '../functions/platform/config.ts';
import { createLogger } from '../functions/platform/logger.ts';
import type { Mailer } from '../functions/platform/mailer.ts';
import { openPGlite } from '../functions/platform/pglite.ts';

/**
 * Prints the SQL Better Auth wants for our plugin set, compiled against an empty embedded database.
 * Run once when the plugin set or the library version changes (`npx tsx scripts/generate-auth-schema.ts`),
 * then paste the output into a new migration by hand (with RLS, foreign keys and our own tables around it).
 * The library's own CLI needs Node 22; this uses its programmatic migration API instead.
 */
const database = await openPGlite(undefined);
const config = loadConfig({ AUTH_SECRET: 'x'.repeat(32), PUBLIC_BASE_URL: 'http://127.0.0.1:8000' });
const unused = async () => {
  throw new Error('not used while compiling the schema');
};
const mailer: Mailer = { enqueue: unused, deliverPending: unused, start() {}, stop: async () => {} };
const options = authOptions({ config, database, logger: createLogger({ level: 'error' }), clock: systemClock, mailer });
const { compileMigrations } = await getMigrations(options);
console.log(await compileMigrations());
await database.close();
