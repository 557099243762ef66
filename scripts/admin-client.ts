import { provisionFirstPartyClient } from '../functions/auth/agent-clients.ts';
import { ConfigError, loadConfig } from '../functions/platform/config.ts';
import { exitIfDatabaseInUse } from '../functions/platform/embedded-database-lock.ts';
import { systemClock } from '../functions/platform/clock.ts';
import { migrate } from '../functions/platform/migrations.ts';
import { openConfiguredDatabase, withPersistedSecret } from '../functions/platform/node-runtime.ts';

/**
 * `npm run admin-client -- --redirect-uri <uri> [--name <name>]`: creates a first-party OAuth client of the
 * marketplace for admin automation and prints its credentials once. A platform admin then runs the authorization-code
 * flow with PKCE once, asking for `scope=openid offline_access admin`, and the automation keeps the refresh token
 * (docs/oauth.md, "Admin automation"). Agents' clients never get the admin scope; this is the only way to one.
 */
async function main() {
  const args = process.argv.slice(2);
  const arg = (name: string) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const redirectUri = arg('--redirect-uri');
  if (!redirectUri) {
    console.error('usage: npm run admin-client -- --redirect-uri https://ops.example.com/callback [--name "Back office"]');
    process.exit(2);
  }
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
    await migrate(database);
    const credentials = await database.db
      .transaction()
      .execute((trx) =>
        provisionFirstPartyClient({ clock: systemClock, config }, trx, { name: arg('--name') ?? 'Marketplace automation', redirectUris: [redirectUri] }),
      );
    console.log(JSON.stringify({ ...credentials, redirectUri, scope: 'openid offline_access admin' }, null, 2));
    console.log('The secret is shown once. Sign in as a platform admin and run the authorization-code flow with it.');
  } finally {
    await database.close();
  }
}

main().catch((err) => {
  exitIfDatabaseInUse(err); // `npm start` holds the embedded database: stop it first (docs/oauth.md, Admin automation)
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
